/**
 * mq/ — the queue of detached calls: the Queue interface and its contract
 * suite; sqlite.ts keeps it in a SQLite file through the database's writer
 * thread, sql.ts in a Postgres or MySQL database, redis.ts in Redis.
 */
import type { SqlDatastore } from '../datastore/index.js';
import type { Queue } from './queue.js';
import { SqlQueue } from './sql.js';
import { SqliteQueue } from './sqlite.js';

export { IDEMPOTENCY_WINDOW_MS } from './queue.js';
export type { Queue, QueuedCall } from './queue.js';
export { RedisQueue } from './redis.js';
export type { RedisPersistence } from './redis.js';
export { SqlQueue } from './sql.js';
export { SqliteQueue } from './sqlite.js';

/** The embedded queue in the datastore's own database: through its writer thread on SQLite, statements over its pool otherwise. */
export function databaseQueue(datastore: SqlDatastore, now?: () => number): Queue {
  return datastore.thread
    ? new SqliteQueue(datastore.thread, now)
    : new SqlQueue(
        () => datastore.database(),
        now,
        () => datastore.statementBatches(),
      );
}
