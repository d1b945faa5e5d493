/**
 * FN_NODE_TYPE=api: the REST API on its database, the call records LBs hand
 * in, and the redrive of dead detached calls from the queue its full nodes
 * share (a table of the same database) or its LBs do (Redis, FN_MQ_URL:
 * then it also reconciles their records with the queue).
 */
import { linkChanges } from '../datastore/index.js';
import { Changes } from '../models/index.js';
import { databaseQueue } from '../mq/index.js';
import { durableRedis, openDatabase, openSecrets, reconcilerFor, recorderFor, startTokens } from './common.js';
import type { Role } from './parts.js';

export const api: Role = async ({ config, logger, metrics }, made) => {
  const datastore = (made.datastore = await openDatabase(config, logger));
  await startTokens(config, logger, datastore.tokens, made);
  // Its full nodes (on the same database and data directory) read what is set here with the same key.
  made.secrets = await openSecrets(config, logger, datastore);
  made.changes = new Changes(logger);
  made.changeLink = await linkChanges(datastore, made.changes, logger.child({ module: 'changes' }));
  made.api = true;
  // No calls run here, but LBs hand their records in: removed past their retention here.
  const recorder = recorderFor(config, logger, datastore.calls);
  if (recorder) made.recorder = recorder;
  // The queue its full nodes (the same database) or LBs (FN_MQ_URL) keep detached calls in: this node redrives dead ones.
  const queue = (made.queue = config.mqUrl ? await durableRedis(config, logger) : databaseQueue(datastore));
  metrics?.watchQueue(queue);
  // With the LBs' queue this node sees both the records and the queue: it reconciles them (a full node does its own).
  if (config.mqUrl) made.reconciler = reconcilerFor(config, logger, queue, datastore.calls);
};
