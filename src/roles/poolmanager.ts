/**
 * FN_NODE_TYPE=poolmanager: LBs advertise what each runner group needs
 * (NodePoolScaler) and ask for its runners (RunnerManager) on FN_GRPC_PORT
 * (9191); the groups are scaled through FNTS_CONTROL_PLANE. It keeps no
 * database and no queue.
 */
import { selfInstance } from '../agent/index.js';
import { CapacityBook, PoolManager, PoolManagerServer, PoolMetrics, PREDICTORS, RunnerStatus } from '../poolmanager/index.js';
import { createControlPlane } from '../poolmanager/planes/index.js';
import { fleetTls, functionNetwork, logGrpcSecurity } from './common.js';
import type { Role } from './parts.js';

export const poolmanager: Role = async ({ config, logger, metrics }, made) => {
  const { pool } = config;
  const log = logger.child({ module: 'poolmanager' });
  const a = config.agent;
  // Runners get the settings that make them part of this fleet.
  const runnerEnv: Record<string, string> = {
    FN_LOG_LEVEL: config.logLevel,
    FN_LOG_FORMAT: config.logFormat,
    ...(a.containerTag ? { FN_CONTAINER_LABEL_TAG: a.containerTag } : {}),
    FNTS_FUNCTION_NETWORK: a.functionNetwork,
    FNTS_FUNCTION_NETWORK_NAME: a.functionNetworkName,
    ...(a.dockerNetworks.length > 0 ? { FN_DOCKER_NETWORKS: a.dockerNetworks.join(',') } : {}),
  };
  // Runners run in containers, where the host's iptables cannot be reached:
  // on the engine it manages (docker, swarm: its own node) the manager
  // makes the functions' network and its fence for them, before the first
  // runner starts; they join it (drivers/docker/network.ts). The engine's
  // network stays while their functions are on it, the manager stopped or not.
  const fence = pool.controlPlane === 'kubernetes' ? undefined : functionNetwork(config, logger, selfInstance());
  if (fence) made.stop = () => fence.close();
  // Made before the first runner starts: a runner finding no network would run its functions unfenced.
  await fence?.networkFor().catch(() => undefined);
  // Runners serve with the manager's own TLS files (compileConfig refuses plaintext runners the network reaches, unless FNTS_GRPC_INSECURE=true).
  const plane = await createControlPlane(pool, runnerEnv, config.agent.containerTag, config.fleet.tls);
  const book = new CapacityBook({ ttlMs: pool.requirementTtlMs });
  const tls = fleetTls(config);
  // Its probes check runners' certificates as LBs do (FNTS_GRPC_TLS_RUNNER_NAME).
  const status = new RunnerStatus(tls);
  const events = metrics ? new PoolMetrics(metrics.registry, book) : undefined;
  const manager = new PoolManager({
    plane,
    book,
    predictor: PREDICTORS[pool.predictor],
    probe: status.probe,
    log,
    runnerMemMb: pool.runnerMemMb,
    minRunners: pool.minRunners,
    maxRunners: pool.maxRunners,
    maxProvisionPerTick: pool.maxProvisionPerTick,
    tickMs: pool.tickMs,
    leadMs: pool.runnerStartMs,
    drainGraceMs: pool.drainGraceMs,
    maxDrainMs: pool.maxDrainMs,
    startTimeoutMs: pool.startTimeoutMs,
    ...(events ? { events } : {}),
  });
  events?.watch(manager);
  const server = new PoolManagerServer({ manager, book, log, tls: tls && { ca: tls.ca, key: tls.key, cert: tls.cert } });
  made.stop = async () => {
    status.close();
    await plane.close();
    await fence?.close();
  };
  const grpcPort = (made.grpcPort = await server.listen(config.fleet.grpcListenHost, pool.grpcPort));
  manager.start();
  made.stop = async () => {
    await server.close();
    await manager.close();
    status.close();
    await plane.close();
    await fence?.close();
  };
  logGrpcSecurity(config, logger, "the pool manager's gRPC port", grpcPort);
  if (config.fleet.insecure && !config.fleet.tls) {
    logger.warn({ controlPlane: plane.kind }, 'runners are started serving PLAINTEXT gRPC (FNTS_GRPC_INSECURE=true): keep them on a private network, or set FNTS_GRPC_TLS_CERT, _KEY and _CA');
  } else if (!config.fleet.tls) {
    logger.info({ publishHost: pool.publishHost ?? '127.0.0.1' }, 'runners are started serving plaintext gRPC, published on loopback only');
  }
  logger.info({ grpcPort, controlPlane: plane.kind, predictor: pool.predictor, runners: [pool.minRunners, pool.maxRunners] }, `pool manager serving on :${grpcPort}`);
};
