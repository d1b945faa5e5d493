/**
 * FN_NODE_TYPE=full (the default): the REST API and the local agent behind
 * the invoke endpoints, on one database (the SQLite file by default), with
 * detached calls in a table of it (or Redis, FN_MQ_URL) run by the agent's
 * async workers; fns' secrets from the same database reach their containers
 * as files.
 */
import { LocalInvokeGuard } from '../auth/index.js';
import { linkChanges } from '../datastore/index.js';
import { Changes } from '../models/index.js';
import { databaseQueue } from '../mq/index.js';
import { engineCheck, FnLookup, InvokeHandler, networkCheck, SyslogForwarder } from '../server/index.js';
import { detachedCalls, durableRedis, openDatabase, openSecrets, reconcilerFor, recorderFor, secretSource, startAgent, startTokens } from './common.js';
import type { Role } from './parts.js';

export const full: Role = async (ctx, made) => {
  const { config, logger, metrics } = ctx;
  const datastore = (made.datastore = await openDatabase(config, logger));
  await startTokens(config, logger, datastore.tokens, made);
  const queue = (made.queue = config.mqUrl ? await durableRedis(config, logger) : databaseQueue(datastore));
  metrics?.watchQueue(queue);
  const secrets = (made.secrets = await openSecrets(config, logger, datastore));
  const changes = (made.changes = new Changes(logger));
  made.changeLink = await linkChanges(datastore, changes, logger.child({ module: 'changes' }));
  made.api = true;
  const { agent, network } = await startAgent(ctx, changes, {}, secretSource(secrets), datastore.keepAlive);
  made.agent = made.invoker = agent;
  made.listening = () => network.start();
  const recorder = recorderFor(config, logger, datastore.calls);
  if (recorder) {
    made.recorder = recorder;
    agent.addListener(recorder);
  }
  const syslog = (made.syslog = new SyslogForwarder(logger.child({ module: 'syslog' })));
  agent.addListener(syslog);
  const { workers, intake } = detachedCalls({
    config,
    invoker: agent,
    queue,
    resources: agent.resources,
    store: recorder ? datastore.calls : undefined,
    instance: agent.config.instance,
    logger,
    metrics,
  });
  made.workers = workers;
  const guard = made.tokens ? new LocalInvokeGuard(made.tokens.registry) : undefined;
  made.invoke = new InvokeHandler({
    invoker: agent,
    detached: intake,
    lookup: new FnLookup(datastore, changes, secrets),
    logger,
    maxRequestBytes: config.agent.maxRequestBytes,
    ...(guard ? { guard } : {}),
  });
  made.reconciler = reconcilerFor(config, logger, queue, datastore.calls);
  // Calls need the engine: without it this node is up (the API works) but not ready for calls; nor without the fence its functions should have.
  made.checks = [engineCheck(agent.driver), ...networkCheck(network)];
};
