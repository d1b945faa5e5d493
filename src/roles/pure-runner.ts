/**
 * FN_NODE_TYPE=pure-runner: the local agent behind Fn's gRPC RunnerProtocol
 * (FN_GRPC_PORT). It keeps no database and no queue. Its resources never
 * block: a call that would wait for memory is refused (503) so that the LB
 * places it on another runner, as Fn's pure runners do.
 */
import { RunnerSecrets, RunnerServer } from '../runner/index.js';
import { engineCheck, networkCheck, SyslogForwarder } from '../server/index.js';
import { fleetTls, logGrpcSecurity, startAgent } from './common.js';
import type { Role } from './parts.js';

export const pureRunner: Role = async (ctx, made) => {
  const { config, logger, metrics } = ctx;
  // The secrets an fnts LB sends with calls, held for their fns' containers while the calls run.
  const secrets = new RunnerSecrets();
  const { agent, network } = await startAgent(ctx, undefined, { nonBlockingResources: true }, secrets);
  made.agent = made.invoker = agent;
  made.listening = () => network.start();
  const syslog = (made.syslog = new SyslogForwarder(logger.child({ module: 'syslog' })));
  agent.addListener(syslog);
  const tls = fleetTls(config);
  const runner = new RunnerServer({ invoker: agent, log: logger, maxRequestBytes: config.agent.maxRequestBytes, secrets, ...(tls ? { tls } : {}), ...(metrics ? { events: metrics } : {}) });
  const grpcPort = (made.grpcPort = await runner.listen(config.fleet.grpcListenHost, config.fleet.grpcPort));
  made.runner = runner;
  logGrpcSecurity(config, logger, 'the runner protocol', grpcPort);
  logger.info({ grpcPort }, `runner protocol serving on :${grpcPort}`);
  made.checks = [engineCheck(agent.driver), ...networkCheck(network)];
};
