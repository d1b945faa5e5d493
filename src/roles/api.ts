/**
 * FN_NODE_TYPE=api: the REST API on its database, and the call records LBs
 * hand in. With the LBs' queue (FN_MQ_URL) it redrives dead detached calls
 * and reconciles their records with the queue.
 */
import { openSqlDatastore } from '../datastore/index.js';
import { Changes } from '../models/index.js';
import { durableRedis, reconcilerFor, recorderFor } from './common.js';
import type { Role } from './parts.js';

export const api: Role = async ({ config, logger, metrics }, made) => {
  const datastore = (made.datastore = await openSqlDatastore(config.dbUrl));
  made.changes = new Changes(logger);
  made.api = true;
  // No calls run here, but LBs hand their records in: removed past their retention here.
  const recorder = recorderFor(config, logger, datastore.calls);
  if (recorder) made.recorder = recorder;
  if (config.mqUrl) {
    const queue = (made.queue = await durableRedis(config, logger));
    metrics?.watchQueue(queue);
    made.reconciler = reconcilerFor(config, logger, queue, datastore.calls);
  }
};
