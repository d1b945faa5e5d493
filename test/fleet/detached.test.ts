/**
 * Calls through an LB leave their records and logs on the API node, and
 * detached calls through an LB go into the shared queue (FN_MQ_URL, Redis):
 * answered 202 once queued, placed on a runner by the LB's dispatcher,
 * retried and dead-lettered by the fn's rules, and visible in the API
 * node's calls API with their logs.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { containersOfFn } from '../support/containers.js';
import { probeImage } from '../support/functions.js';
import { dockerReachable } from '../support/images.js';
import { startRedis, type TestRedis } from '../support/redis.js';
import { startTestServer, type TestServer } from '../support/server.js';
import { eventually } from '../support/wait.js';
import { bearer, withTestToken } from '../support/auth.js';

const docker = await dockerReachable();
const detached = { 'Fn-Invoke-Type': 'detached' };

async function json(url: string): Promise<any> {
  const res = await fetch(url, { headers: withTestToken(url) });
  return res.status === 200 ? res.json() : undefined;
}

describe.skipIf(!docker)('records and detached calls through an LB', () => {
  let redis: TestRedis;
  let api: TestServer;
  let runner: TestServer;
  let lb: TestServer;
  let image: string;

  beforeAll(async () => {
    [redis, image] = await Promise.all([startRedis(), probeImage()]);
    api = await startTestServer({ FN_NODE_TYPE: 'api', FN_MQ_URL: redis.url });
    runner = await startTestServer({ FN_NODE_TYPE: 'pure-runner', FN_GRPC_PORT: '0' });
    lb = await startTestServer({ FN_NODE_TYPE: 'lb', FN_MQ_URL: redis.url, FN_RUNNER_API_URL: api.url, FN_RUNNER_ADDRESSES: `127.0.0.1:${runner.server.grpcPort}` });
  });

  afterAll(async () => {
    await lb?.close();
    await runner?.close();
    await api?.close();
    await redis?.stop();
  });

  const record = (fnId: string, id: string): Promise<any> => json(`${api.url}/v2/fns/${fnId}/calls/${id}`);
  const logOf = async (fnId: string, id: string): Promise<string> => (await json(`${api.url}/v2/fns/${fnId}/calls/${id}/log`))?.log ?? '';

  it('keeps the record and log of a synchronous call on the API node', async () => {
    const fn = await api.fn(await api.app(), image);
    const res = await lb.invoke(fn.id, { log: 'sync via lb' });
    expect(res.status).toBe(200);
    const id = res.headers.get('fn-call-id')!;
    expect(await eventually(async () => (await record(fn.id, id))?.status === 'success', 5000)).toBe(true);
    expect(await record(fn.id, id)).toMatchObject({ id, fn_id: fn.id, app_id: fn.app_id, status: 'success' });
    expect(await eventually(async () => (await logOf(fn.id, id)).includes('sync via lb (stderr)'), 5000)).toBe(true);
  });

  it('queues a detached call (202 at once), runs it on a runner and keeps its record and log', async () => {
    const fn = await api.fn(await api.app(), image);
    const res = await lb.invoke(fn.id, { log: 'detached via lb', sleep: 300 }, detached);
    expect(res.status).toBe(202);
    expect(res.text).toBe('');
    expect(res.ms).toBeLessThan(300);
    const id = res.headers.get('fn-call-id')!;
    expect(await eventually(async () => (await record(fn.id, id))?.status === 'success', 15_000, 10)).toBe(true);
    // Its log came with the record that says it ended, not after it.
    expect(await logOf(fn.id, id)).toContain('detached via lb (stderr)');
    expect(await record(fn.id, id)).toMatchObject({ id, status: 'success', attempts: 1 });
  });

  it('runs a detached call on the container a sync call left hot on the runner', async () => {
    const fn = await api.fn(await api.app(), image);
    expect((await lb.invoke(fn.id, {})).status).toBe(200);
    const id = (await lb.invoke(fn.id, {}, detached)).headers.get('fn-call-id')!;
    expect(await eventually(async () => (await record(fn.id, id))?.status === 'success', 15_000)).toBe(true);
    expect(await containersOfFn(fn.id)).toHaveLength(1);
  });

  it('retries a detached call the function fails, then keeps it dead; the API node redrives it', async () => {
    const fn = await api.fn(await api.app(), image, { annotations: { 'fnts.io/async-max-attempts': 2 } });
    const id = (await lb.invoke(fn.id, { exit: 3 }, detached)).headers.get('fn-call-id')!;
    expect(await eventually(async () => (await record(fn.id, id))?.status === 'error', 20_000)).toBe(true);
    expect(await record(fn.id, id)).toMatchObject({ status: 'error', attempts: 2 });
    const redrive = await fetch(`${api.url}/v2/fns/${fn.id}/calls/${id}/retry`, { method: 'POST', headers: bearer() });
    expect(redrive.status).toBe(202);
    expect(await redrive.json()).toMatchObject({ id, status: 'queued', attempts: 0 });
    // The LB's dispatcher takes it from the shared queue again: it fails twice more, and is dead again.
    expect(await eventually(async () => (await record(fn.id, id))?.status === 'error', 20_000)).toBe(true);
    expect(await record(fn.id, id)).toMatchObject({ status: 'error', attempts: 2 });
  });

  it("refuses a record batch that is not one, in Fn's words", async () => {
    const res = await fetch(`${api.url}/v2/runner/calls`, { method: 'POST', body: JSON.stringify({ records: [{ id: 'x' }] }), headers: bearer() });
    expect(res.status).toBe(400);
    expect(await res.json()).toEqual({ message: 'Invalid call records: records[0] needs id, fn_id, app_id, status and created_at' });
  });
});
