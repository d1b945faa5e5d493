/**
 * The health endpoints of real servers (production wiring, a SQLite file,
 * the real Docker engine): what a Kubernetes probe sees on a working server
 * of each role, and on one whose datastore has gone away.
 */
import { afterEach, describe, expect, it } from 'vitest';
import { startRedis } from '../support/redis.js';
import { startTestServer, type TestServer } from '../support/server.js';

let s: TestServer | undefined;
afterEach(async () => {
  await s?.close();
  s = undefined;
});

describe('health endpoints', () => {
  it("a working full node: /health and /ready answer 200, /ready with the datastore, the Docker engine and the functions' network fence ok", async () => {
    s = await startTestServer();
    const health = await s.call('/health', { method: 'GET' });
    expect({ status: health.status, body: health.json }).toEqual({ status: 200, body: { status: 'ok' } });
    const ready = await s.call('/ready', { method: 'GET' });
    expect({ status: ready.status, body: ready.json }).toEqual({ status: 200, body: { status: 'ready', checks: { datastore: 'ok', docker: 'ok', network: 'ok' } } });
  });

  it('an api node runs no functions: /ready asks only its datastore', async () => {
    s = await startTestServer({ FN_NODE_TYPE: 'api' });
    const ready = await s.call('/ready', { method: 'GET' });
    expect({ status: ready.status, body: ready.json }).toEqual({ status: 200, body: { status: 'ready', checks: { datastore: 'ok' } } });
  });

  it('with the queue in Redis, /ready asks it too, and answers 503 naming it once Redis is gone', async () => {
    const redis = await startRedis();
    try {
      s = await startTestServer({ FN_NODE_TYPE: 'api', FN_MQ_URL: redis.url });
      const ready = await s.call('/ready', { method: 'GET' });
      expect({ status: ready.status, body: ready.json }).toEqual({ status: 200, body: { status: 'ready', checks: { datastore: 'ok', queue: 'ok' } } });
      await redis.stop();
      const down = await s.call('/ready', { method: 'GET' });
      expect(down.status).toBe(503);
      expect(down.json.checks.datastore).toBe('ok');
      expect(down.json.checks.queue).not.toBe('ok');
    } finally {
      await redis.stop();
    }
  });

  it('/ready answers 503 naming the datastore once it is closed, while /health stays 200', async () => {
    s = await startTestServer();
    await s.server.datastore!.close();
    const ready = await s.call('/ready', { method: 'GET' });
    expect(ready.status).toBe(503);
    expect(ready.json).toEqual({ status: 'not ready', checks: { datastore: 'datastore is closed', docker: 'ok', network: 'ok' } });
    expect((await s.call('/health', { method: 'GET' })).status).toBe(200);
  });
});
