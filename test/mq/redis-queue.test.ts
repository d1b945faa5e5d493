/** The Queue contract on a real Redis server (Debian's redis-server, started for this file). */
import { afterAll, beforeAll } from 'vitest';
import { RedisQueue } from '../../src/mq/redis.js';
import { runQueueContract } from '../../src/mq/queue.contract.js';
import { startRedis, type TestRedis } from '../support/redis.js';

let redis: TestRedis;
beforeAll(async () => {
  redis = await startRedis();
});
afterAll(async () => {
  await redis?.stop();
});

let n = 0;
runQueueContract('redis', async (now) => {
  // A key prefix per test: each starts with an empty queue.
  const queue = new RedisQueue(redis.url, `fnts-test:${process.pid}:${n++}:`, now);
  return { queue, close: () => queue.close() };
});
