/**
 * mq/ — the queue of detached calls: the Queue interface and its contract
 * suite; sql.ts keeps it in the server's own database, redis.ts in Redis.
 */
export { IDEMPOTENCY_WINDOW_MS } from './queue.js';
export type { Queue, QueuedCall } from './queue.js';
export { RedisQueue } from './redis.js';
export type { RedisPersistence } from './redis.js';
export { SqlQueue } from './sql.js';
