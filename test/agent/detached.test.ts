/**
 * Detached calls (Fn-Invoke-Type: detached) on real servers and containers:
 * answered 202 once persisted, run from the queue, retried when the function
 * fails and dead-lettered after the fn's last attempt, and never lost when
 * the server is killed mid-call.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { request } from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { containersOfFn, fnShowsTitle } from '../support/containers.js';
import { probeImage } from '../support/functions.js';
import { startFnts } from '../support/process.js';
import { startRedis, type TestRedis } from '../support/redis.js';
import { startTestServer, type TestServer } from '../support/server.js';
import { eventually } from '../support/wait.js';
import { bearer, withTestToken } from '../support/auth.js';

const detached = { 'Fn-Invoke-Type': 'detached' };

async function json(url: string, init?: RequestInit): Promise<any> {
  const res = await fetch(url, { ...init, headers: withTestToken(url, (init?.headers ?? {}) as Record<string, string>) });
  return res.status === 204 ? undefined : res.json();
}

describe('detached calls', () => {
  let s: TestServer;
  beforeAll(async () => {
    s = await startTestServer();
  });
  afterAll(async () => {
    await s?.close();
  });

  const record = async (fnId: string, id: string): Promise<any> => json(`${s.url}/v2/fns/${fnId}/calls/${id}`);

  it('answers 202 with the call id and no body once queued, then runs the call and keeps its record and log', async () => {
    const app = await s.app();
    const fn = await s.fn(app, await probeImage());
    const res = await s.invoke(fn.id, { log: 'ran detached', sleep: 300 }, detached);
    expect(res.status).toBe(202);
    expect(res.text).toBe('');
    const id = res.headers.get('fn-call-id')!;
    expect(id).toMatch(/^[0-9A-Z]{26}$/);
    // Answered before the function ran (it sleeps 300 ms).
    expect(res.ms).toBeLessThan(300);
    expect(await eventually(async () => (await record(fn.id, id)).status === 'success', 15_000)).toBe(true);
    expect(await record(fn.id, id)).toMatchObject({ id, status: 'success', attempts: 1, fn_id: fn.id });
    expect(await eventually(async () => (await json(`${s.url}/v2/fns/${fn.id}/calls/${id}/log`))?.log?.includes('ran detached (stderr)'), 5000)).toBe(true);
  });

  it('retries a call the function fails, then keeps it dead with its attempts and last error', async () => {
    const app = await s.app();
    const fn = await s.fn(app, await probeImage(), { annotations: { 'fnts.io/async-max-attempts': 2 } });
    const res = await s.invoke(fn.id, { exit: 3 }, detached);
    expect(res.status).toBe(202);
    const id = res.headers.get('fn-call-id')!;
    expect(await eventually(async () => (await record(fn.id, id)).status === 'error', 20_000)).toBe(true);
    const dead = await record(fn.id, id);
    expect(dead).toMatchObject({ status: 'error', attempts: 2 });
    expect(dead.error).toMatch(/exit|code 3|failed/i);
  });

  it("queues one call per Fn-Idempotency-Key and answers a repeat with the first call's id", async () => {
    const app = await s.app();
    const fn = await s.fn(app, await probeImage());
    const key = { ...detached, 'Fn-Idempotency-Key': `order-${Date.now()}` };
    const first = await s.invoke(fn.id, { log: 'once' }, key);
    const again = await s.invoke(fn.id, { log: 'once' }, key);
    expect(first.status).toBe(202);
    expect(again.status).toBe(202);
    expect(again.headers.get('fn-call-id')).toBe(first.headers.get('fn-call-id'));
    const id = first.headers.get('fn-call-id')!;
    expect(await eventually(async () => (await record(fn.id, id)).status === 'success', 15_000)).toBe(true);
    // Only the one call ran.
    const listed = await json(`${s.url}/v2/fns/${fn.id}/calls`);
    expect(listed.items.map((c: any) => c.id)).toEqual([id]);
  });

  it('runs a dead call again on request, and only a dead one', async () => {
    const app = await s.app();
    const fn = await s.fn(app, await probeImage(), { annotations: { 'fnts.io/async-max-attempts': 1 } });
    const id = (await s.invoke(fn.id, { exit: 4 }, detached)).headers.get('fn-call-id')!;
    expect(await eventually(async () => (await record(fn.id, id)).status === 'error', 15_000)).toBe(true);
    const retried = await fetch(`${s.url}/v2/fns/${fn.id}/calls/${id}/retry`, { method: 'POST', headers: bearer() });
    expect(retried.status).toBe(202);
    expect(await retried.json()).toMatchObject({ id, status: 'queued', attempts: 0 });
    // It fails again (the function still exits), and is dead again after its one attempt.
    expect(await eventually(async () => (await record(fn.id, id)).status === 'error', 15_000)).toBe(true);
    const ok = (await s.invoke(fn.id, {}, detached)).headers.get('fn-call-id')!;
    expect(await eventually(async () => (await record(fn.id, ok)).status === 'success', 15_000)).toBe(true);
    const refused = await fetch(`${s.url}/v2/fns/${fn.id}/calls/${ok}/retry`, { method: 'POST', headers: bearer() });
    expect(refused.status).toBe(409);
    expect((await fetch(`${s.url}/v2/fns/${fn.id}/calls/01NOPE/retry`, { method: 'POST', headers: bearer() })).status).toBe(404);
  });

  it('an api node on the same database redrives a dead call, and the full node runs it', async () => {
    const app = await s.app();
    const fn = await s.fn(app, await probeImage(), { annotations: { 'fnts.io/async-max-attempts': 1 } });
    const id = (await s.invoke(fn.id, { exit: 4 }, detached)).headers.get('fn-call-id')!;
    expect(await eventually(async () => (await record(fn.id, id)).status === 'error', 15_000)).toBe(true);
    const api = await startTestServer({ FN_NODE_TYPE: 'api', FN_DB_URL: s.config.dbUrl });
    try {
      const retried = await fetch(`${api.url}/v2/fns/${fn.id}/calls/${id}/retry`, { method: 'POST', headers: bearer() });
      expect(retried.status).toBe(202);
      expect(await retried.json()).toMatchObject({ id, status: 'queued', attempts: 0 });
    } finally {
      await api.close();
    }
    // The full node's workers take it from the shared queue and run it (it fails again: dead after its one attempt).
    expect(await eventually(async () => (await record(fn.id, id)).status === 'error', 15_000)).toBe(true);
  });

  it('refuses a max-attempts annotation outside 1 to 10', async () => {
    const app = await s.app();
    for (const bad of [0, 11, 2.5, '3']) {
      const res = await fetch(`${s.url}/v2/fns`, {
        method: 'POST',
        body: JSON.stringify({ app_id: app.id, name: `bad${String(bad).replace('.', '')}`, image: 'x', annotations: { 'fnts.io/async-max-attempts': bad } }),
        headers: bearer(),
      });
      expect(res.status).toBe(400);
      expect(((await res.json()) as { message: string }).message).toBe('Invalid annotation fnts.io/async-max-attempts, it must be a whole number from 1 to 10');
    }
  });

  it("stores a call's log no later than the record that says it ended", async () => {
    const app = await s.app();
    const fn = await s.fn(app, await probeImage());
    for (const n of [1, 2, 3]) {
      const id = (await s.invoke(fn.id, { log: `early log ${n}` }, detached)).headers.get('fn-call-id')!;
      // Looked at as often as a client might: the moment the record says success, the log is there.
      expect(await eventually(async () => (await record(fn.id, id)).status === 'success', 15_000, 10)).toBe(true);
      const log = await fetch(`${s.url}/v2/fns/${fn.id}/calls/${id}/log`, { headers: bearer() });
      expect(log.status).toBe(200);
      expect(((await log.json()) as { log: string }).log).toContain(`early log ${n} (stderr)`);
    }
  });

  it('runs a detached call on the container its fn already has hot, rather than starting another', async () => {
    const app = await s.app();
    const fn = await s.fn(app, await probeImage());
    const hot = await s.invoke(fn.id, {});
    expect(hot.status).toBe(200);
    const id = (await s.invoke(fn.id, { log: 'on the hot one' }, detached)).headers.get('fn-call-id')!;
    expect(await eventually(async () => (await record(fn.id, id)).status === 'success', 15_000)).toBe(true);
    const containers = await containersOfFn(fn.id);
    expect(containers).toHaveLength(1);
    expect(containers[0]!.Id.startsWith(hot.json.hostname)).toBe(true);
  });

  it('refuses a detached body over FNTS_ASYNC_MAX_BODY_SIZE (6 MiB by default) with 413, queueing nothing, and takes one at the cap', async () => {
    const app = await s.app();
    const fn = await s.fn(app, await probeImage());
    const cap = 6 * 1024 * 1024;
    const over = await fetch(`${s.url}/invoke/${fn.id}`, { method: 'POST', headers: detached, body: Buffer.alloc(cap + 1, 'x') });
    expect(over.status).toBe(413);
    expect(await over.json()).toEqual({ message: 'Request content too large' });
    // Sent without a length (chunked), it is cut the same way.
    const chunked = await fetch(`${s.url}/invoke/${fn.id}`, {
      method: 'POST',
      headers: detached,
      duplex: 'half',
      body: new ReadableStream({
        pull(c) {
          for (let i = 0; i < 7; i++) c.enqueue(new Uint8Array(1024 * 1024).fill(120));
          c.close();
        },
      }),
    } as RequestInit);
    expect(chunked.status).toBe(413);
    // Announced with Expect: 100-continue, it is refused before it is sent.
    const u = new URL(`${s.url}/invoke/${fn.id}`);
    const announced = await new Promise<{ status: number; continued: boolean }>((resolve, reject) => {
      let continued = false;
      const req = request({ host: u.hostname, port: u.port, path: u.pathname, method: 'POST', headers: { ...detached, expect: '100-continue', 'content-length': cap + 1 } });
      req.on('continue', () => {
        continued = true;
        req.end(Buffer.alloc(cap + 1));
      });
      req.on('response', (res) => {
        res.resume();
        res.on('end', () => resolve({ status: res.statusCode!, continued }));
      });
      req.on('error', reject);
      req.flushHeaders();
    });
    expect(announced).toEqual({ status: 413, continued: false });
    expect((await json(`${s.url}/v2/fns/${fn.id}/calls`)).items).toEqual([]);
    const at = await fetch(`${s.url}/invoke/${fn.id}`, { method: 'POST', headers: { ...detached, 'Content-Type': 'application/json' }, body: JSON.stringify({ pad: 'x'.repeat(cap - 20) }) });
    expect(at.status).toBe(202);
    const id = at.headers.get('fn-call-id')!;
    expect(await eventually(async () => (await record(fn.id, id)).status === 'success', 15_000)).toBe(true);
  });

  it('answers /health at once while detached bodies at the cap are taken in', async () => {
    const app = await s.app();
    const fn = await s.fn(app, await probeImage());
    const body = JSON.stringify({ pad: 'x'.repeat(6 * 1024 * 1024 - 20) });
    let slowest = 0;
    let polling = true;
    const poll = (async () => {
      while (polling) {
        const t0 = performance.now();
        expect((await fetch(`${s.url}/health`)).status).toBe(200);
        slowest = Math.max(slowest, performance.now() - t0);
        await new Promise((r) => setTimeout(r, 10));
      }
    })();
    try {
      const sent = await Promise.all([1, 2, 3, 4].map(() => fetch(`${s.url}/invoke/${fn.id}`, { method: 'POST', headers: detached, body })));
      expect(sent.map((r) => r.status)).toEqual([202, 202, 202, 202]);
      const ids = sent.map((r) => r.headers.get('fn-call-id')!);
      // Taken in, then read back and run: /health answers throughout.
      expect(await eventually(async () => (await Promise.all(ids.map((id) => record(fn.id, id)))).every((r) => r.status === 'success'), 20_000)).toBe(true);
    } finally {
      polling = false;
      await poll;
    }
    // A probe with a 1 s timeout never fails for it (issue 21: up to 20 s with a 100 MB body).
    expect(slowest).toBeLessThan(500);
  });

  it('refuses a detached call to a fn that does not exist, as a sync one', async () => {
    const res = await s.invoke('01NOSUCHFN0000000000000000', {}, detached);
    expect(res.status).toBe(404);
  });
});

describe('detached calls across a crash', () => {
  const dir = mkdtempSync(join(tmpdir(), 'fnts-detached-'));
  afterAll(() => rmSync(dir, { recursive: true, force: true }));

  it('runs every accepted call after the server is killed mid-call and started again', async () => {
    const env = { FN_DB_URL: `sqlite3://${join(dir, 'fn.db')}` };
    const first = await startFnts(env);
    const app = await json(`${first.url}/v2/apps`, { method: 'POST', body: JSON.stringify({ name: 'crash' }) });
    const fn = await json(`${first.url}/v2/fns`, { method: 'POST', body: JSON.stringify({ app_id: app.id, name: 'slow', image: await probeImage() }) });
    const res = await fetch(`${first.url}/invoke/${fn.id}`, { method: 'POST', headers: detached, body: JSON.stringify({ title: 'crashme', sleep: 2000 }) });
    expect(res.status).toBe(202);
    const id = res.headers.get('fn-call-id')!;
    // Killed while the call runs in its container.
    expect(await eventually(() => fnShowsTitle(fn.id, 'crashme'), 15_000)).toBe(true);
    first.proc.kill('SIGKILL');
    await new Promise((r) => first.proc.once('exit', r));

    const second = await startFnts(env);
    try {
      expect(await eventually(async () => (await json(`${second.url}/v2/fns/${fn.id}/calls/${id}`)).status === 'success', 20_000)).toBe(true);
    } finally {
      await second.stop();
    }
  });
});

describe('detached calls on Redis (FN_MQ_URL)', () => {
  let redis: TestRedis;
  let s: TestServer;
  beforeAll(async () => {
    redis = await startRedis();
    s = await startTestServer({ FN_MQ_URL: redis.url });
  });
  afterAll(async () => {
    await s?.close();
    await redis?.stop();
  });

  it('queues in Redis and runs the call, idempotency key included', async () => {
    const app = await s.app();
    const fn = await s.fn(app, await probeImage());
    const headers = { ...detached, 'Fn-Idempotency-Key': 'redis-once' };
    const first = await s.invoke(fn.id, { log: 'via redis' }, headers);
    const again = await s.invoke(fn.id, { log: 'via redis' }, headers);
    expect(first.status).toBe(202);
    expect(again.headers.get('fn-call-id')).toBe(first.headers.get('fn-call-id'));
    const id = first.headers.get('fn-call-id')!;
    expect(await eventually(async () => (await json(`${s.url}/v2/fns/${fn.id}/calls/${id}`)).status === 'success', 15_000)).toBe(true);
  });
});
