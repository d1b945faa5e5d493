import { request } from 'node:http';
import { connect } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { containersOfFn } from '../support/containers.js';
import { probeImage } from '../support/functions.js';
import { startTestServer, type TestServer } from '../support/server.js';
import { eventually, requestArrives } from '../support/wait.js';

let probe: string;
beforeAll(async () => {
  probe = await probeImage();
});

describe('when calls cannot be served as asked', () => {
  let s: TestServer;
  beforeAll(async () => {
    s = await startTestServer({
      FN_MAX_RESPONSE_SIZE: '4096',
      FN_MAX_REQUEST_SIZE: '4096',
      FN_HOT_START_TIMEOUT_MSECS: '1500',
      FN_MAX_TOTAL_MEMORY_BYTES: String(1024 * 1024 * 1024),
    });
  });
  afterAll(async () => {
    await s?.close();
  });

  it("answers 504 Timed out at the fn's timeout, retires the container, and serves the next call fresh", async () => {
    const app = await s.app();
    const fn = await s.fn(app, probe, { timeout: 1 });
    const warm = await s.invoke(fn.id, {});
    const late = await s.invoke(fn.id, { sleep: 4000 });
    expect(late.status).toBe(504);
    expect(late.json).toEqual({ message: 'Timed out' });
    expect(late.ms).toBeLessThan(2000);
    expect(await eventually(async () => !(await containersOfFn(fn.id)).some((c) => c.Id.startsWith(warm.json.hostname)), 3000)).toBe(true);
    const next = await s.invoke(fn.id, { n: 1 });
    expect(next.status).toBe(200);
    expect(next.json.body).toEqual({ n: 1 });
    expect(next.json.hostname).not.toBe(warm.json.hostname);
  });

  it('answers 502 naming the cause when the container dies mid-call, then works again', async () => {
    const app = await s.app();
    const fn = await s.fn(app, probe);
    const dead = await s.invoke(fn.id, { exit: 7 });
    expect(dead.status).toBe(502);
    expect(dead.json).toEqual({ message: 'function failed: container exited with code 7' });
    const next = await s.invoke(fn.id, {});
    expect(next.status).toBe(200);
  });

  it('answers 502 function failed when the function throws (the FDK says 502), as Fn does, and keeps the container', async () => {
    const app = await s.app();
    const fn = await s.fn(app, probe);
    const warm = await s.invoke(fn.id, {});
    const failed = await s.invoke(fn.id, { throw: 'boom' });
    expect(failed.status).toBe(502);
    expect(failed.json).toEqual({ message: 'function failed' });
    const next = await s.invoke(fn.id, {});
    expect(next.status).toBe(200);
    expect(next.json.hostname).toBe(warm.json.hostname);
  });

  it('answers 504 when the FDK never becomes ready, and leaves no container behind', async () => {
    const app = await s.app();
    const fn = await s.fn(app, probe, { config: { MODE: 'never-ready' } });
    const res = await s.invoke(fn.id, {});
    expect(res.status).toBe(504);
    expect(res.json).toEqual({ message: 'Container initialization timed out, please ensure you are using the latest fdk and check the logs' });
    expect(res.ms).toBeLessThan(4000);
    expect(await eventually(async () => (await containersOfFn(fn.id)).length === 0, 3000)).toBe(true);
  });

  it('answers 502 when the container exits before it is ready', async () => {
    const app = await s.app();
    const fn = await s.fn(app, probe, { config: { MODE: 'exit-on-start' } });
    const res = await s.invoke(fn.id, {});
    expect(res.status).toBe(502);
    expect(res.json.message).toBe('Container failed to initialize, please ensure you are using the latest fdk and check the logs (container exited with code 3)');
    expect(await eventually(async () => (await containersOfFn(fn.id)).length === 0, 3000)).toBe(true);
  });

  it('answers 502 function response body too large over FN_MAX_RESPONSE_SIZE, and 200 under it', async () => {
    const app = await s.app();
    const fn = await s.fn(app, probe);
    const big = await s.invoke(fn.id, { bytes: 5000 });
    expect(big.status).toBe(502);
    expect(big.json).toEqual({ message: 'function response body too large' });
    const ok = await s.invoke(fn.id, { bytes: 4000 });
    expect(ok.status).toBe(200);
    expect(ok.text).toBe('x'.repeat(4000));
  });

  it('answers 413 to a request body over FN_MAX_REQUEST_SIZE, declared or streamed, and the function is fine', async () => {
    const app = await s.app();
    const fn = await s.fn(app, probe);
    const declared = await s.invoke(fn.id, 'x'.repeat(5000));
    expect(declared.status).toBe(413);
    expect(declared.json).toEqual({ message: 'Request content too large' });
    const streamed = await fetch(`${s.url}/invoke/${fn.id}`, {
      method: 'POST',
      body: new ReadableStream({
        start(c) {
          for (let i = 0; i < 10; i++) c.enqueue(new TextEncoder().encode('y'.repeat(1000)));
          c.close();
        },
      }),
      duplex: 'half',
    } as RequestInit);
    expect(streamed.status).toBe(413);
    expect(await streamed.json()).toEqual({ message: 'Request content too large' });
    expect((await s.invoke(fn.id, { small: true })).status).toBe(200);
  });

  it('refuses an oversized body announced with Expect: 100-continue before the client sends it', async () => {
    const app = await s.app();
    const fn = await s.fn(app, probe);
    const u = new URL(`${s.url}/invoke/${fn.id}`);
    const ask = (length: number) =>
      new Promise<{ status: number; body: string; continued: boolean }>((resolve, reject) => {
        let continued = false;
        const req = request({ host: u.hostname, port: u.port, path: u.pathname, method: 'POST', headers: { expect: '100-continue', 'content-length': length } });
        req.on('continue', () => {
          continued = true;
          req.end('z'.repeat(length));
        });
        req.on('response', (res) => {
          let body = '';
          res.on('data', (c: Buffer) => (body += c.toString()));
          res.on('end', () => resolve({ status: res.statusCode!, body, continued }));
        });
        req.on('error', reject);
        req.flushHeaders();
      });
    expect(await ask(1024 * 1024)).toEqual({ status: 413, body: '{"message":"Request content too large"}', continued: false });
    const fine = await ask(100);
    expect(fine).toMatchObject({ status: 200, continued: true });
  });

  it('answers 400 when the fn asks for more memory than this server has', async () => {
    const app = await s.app();
    const fn = await s.fn(app, probe, { memory: 4096 });
    const res = await s.invoke(fn.id, {});
    expect(res.status).toBe(400);
    expect(res.json).toEqual({ message: 'Requested CPU/Memory cannot be allocated' });
  });
});

describe('when the server is full', () => {
  let s: TestServer;
  beforeAll(async () => {
    // Room for one 128 MB container only.
    s = await startTestServer({ FN_MAX_TOTAL_MEMORY_BYTES: String(200 * 1024 * 1024) });
  });
  afterAll(async () => {
    await s?.close();
  });

  it('answers 503 Timed out - server too busy with Retry-After when no container frees up by the slot deadline', async () => {
    const app = await s.app();
    // timeout 4 s: a call waits at most 2 s for a container.
    const fn = await s.fn(app, probe, { timeout: 4 });
    // Runs past the refused call's 2 s wait.
    const busy = s.invoke(fn.id, { sleep: 3000 });
    expect(await eventually(() => s.queue(fn.id)?.running === 1, 5000, 20)).toBe(true);
    const refused = await s.invoke(fn.id, {});
    expect(refused.status).toBe(503);
    expect(refused.json).toEqual({ message: 'Timed out - server too busy' });
    expect(refused.headers.get('retry-after')).toBe('15');
    expect(refused.ms).toBeGreaterThan(1800);
    expect(refused.ms).toBeLessThan(2600);
    expect((await busy).status).toBe(200);
  });
});

describe('a client that stalls its upload', () => {
  let s: TestServer;
  beforeAll(async () => {
    // Room for one 128 MB container only.
    s = await startTestServer({ FN_MAX_TOTAL_MEMORY_BYTES: String(200 * 1024 * 1024) });
  });
  afterAll(async () => {
    await s?.close();
  });

  it('holds no container while its body has not arrived: other calls are served meanwhile', async () => {
    const app = await s.app();
    const fn = await s.fn(app, probe, { timeout: 4 });
    expect((await s.invoke(fn.id, {})).status).toBe(200);
    const u = new URL(s.url);
    const stalled = connect(Number(u.port), u.hostname);
    stalled.on('error', () => undefined);
    await new Promise<void>((r) => stalled.once('connect', () => r()));
    const arrived = requestArrives((req) => req.url === `/invoke/${fn.id}` && req.headers['content-length'] === String(2 * 1024 * 1024));
    // 2 MB announced, 100 KB sent, then nothing.
    stalled.write(`POST /invoke/${fn.id} HTTP/1.1\r\nHost: x\r\nContent-Length: ${2 * 1024 * 1024}\r\n\r\n`);
    stalled.write(Buffer.alloc(100 * 1024, 'z'));
    try {
      // The server has the stalled call before the other one: were it to take
      // a container on the headers, it would take the only one first.
      await arrived;
      const other = await s.invoke(fn.id, { n: 2 });
      expect(other.status).toBe(200);
      expect(other.json.body).toEqual({ n: 2 });
      expect(other.ms).toBeLessThan(1000);
    } finally {
      stalled.destroy();
    }
  });
});
