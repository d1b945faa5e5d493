import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { containersOfFn } from '../support/containers.js';
import { docker, ensureFunctionImage, HELLO_FUNC_JS } from '../support/images.js';
import { probeImage } from '../support/functions.js';
import { startTestServer, type TestServer } from '../support/server.js';
import { eventually } from '../support/wait.js';

let s: TestServer;
let probe: string;
let hello: string;

beforeAll(async () => {
  [probe, hello] = await Promise.all([probeImage(), ensureFunctionImage('hello', HELLO_FUNC_JS)]);
  s = await startTestServer({ FN_FREEZE_IDLE_MSECS: '150' });
});
afterAll(async () => {
  await s?.close();
});

describe('hot functions', () => {
  it('runs an official-FDK function unchanged and answers with its response', async () => {
    const app = await s.app();
    const fn = await s.fn(app, hello);
    const res = await s.invoke(fn.id, { name: 'fnts' });
    expect(res.status).toBe(200);
    expect(res.json).toEqual({ message: 'Hello fnts' });
    expect(res.headers.get('content-type')).toBe('application/json');
    expect(res.headers.get('fn-call-id')).toMatch(/^[0-9A-Z]{26}$/);
  });

  it('puts Fn-Call-Id on error answers too, and refuses other methods on /invoke', async () => {
    const missing = await s.invoke('01NOSUCHFN0000000000000000');
    expect(missing.status).toBe(404);
    expect(missing.json).toEqual({ message: 'Fn not found' });
    expect(missing.headers.get('fn-call-id')).toMatch(/^[0-9A-Z]{26}$/);
    const get = await s.call('/invoke/whatever', { method: 'GET' });
    expect(get.status).toBe(405);
    expect(get.json).toEqual({ message: 'Method not allowed: GET /invoke/whatever' });
  });

  it('reuses one hot container for calls that follow each other', async () => {
    const app = await s.app();
    const fn = await s.fn(app, probe);
    const hosts = new Set<string>();
    for (let i = 0; i < 5; i++) {
      const res = await s.invoke(fn.id, { i });
      expect(res.status).toBe(200);
      expect(res.json.body).toEqual({ i });
      hosts.add(res.json.hostname);
    }
    expect(hosts.size).toBe(1);
    expect(await containersOfFn(fn.id)).toHaveLength(1);
  });

  it('runs one call at a time per container and reuses the most recently freed one first', async () => {
    const app = await s.app();
    const fn = await s.fn(app, probe);
    // A long call holds the first container; a call arriving meanwhile waits,
    // gets a second container, and finishes first. The long call's container
    // is then the most recently freed: LIFO hands it out next. The long call
    // must outlast the second container's start.
    const long = s.invoke(fn.id, { sleep: 2500 });
    expect(await eventually(() => s.queue(fn.id)?.running === 1, 5000, 20)).toBe(true);
    const short = await s.invoke(fn.id, { sleep: 50 });
    const longDone = await long;
    expect(short.json.hostname).not.toBe(longDone.json.hostname);
    for (let i = 0; i < 3; i++) {
      expect((await s.invoke(fn.id, {})).json.hostname).toBe(longDone.json.hostname);
    }
  });

  it('pauses an idle container after FN_FREEZE_IDLE_MSECS and unpauses it for the next call', async () => {
    const app = await s.app();
    const fn = await s.fn(app, probe);
    const first = await s.invoke(fn.id, {});
    const [info] = await containersOfFn(fn.id);
    const container = docker().getContainer(info!.Id);
    expect(await eventually(async () => (await container.inspect()).State.Paused, 3000, 20)).toBe(true);
    const second = await s.invoke(fn.id, {});
    expect(second.status).toBe(200);
    expect(second.json.hostname).toBe(first.json.hostname);
    expect((await container.inspect()).State.Paused).toBe(false);
  });

  it("removes a container once the fn's idle_timeout passes", async () => {
    const app = await s.app();
    const fn = await s.fn(app, probe, { idle_timeout: 1 });
    expect((await s.invoke(fn.id, {})).status).toBe(200);
    expect(await containersOfFn(fn.id)).toHaveLength(1);
    expect(await eventually(async () => (await containersOfFn(fn.id)).length === 0, 5000, 50)).toBe(true);
  });

  it('gives the function the FDK contract environment with app config overridden by fn config', async () => {
    const app = await s.app({ config: { CFG_APP: 'a', CFG_BOTH: 'app' } });
    const fn = await s.fn(app, probe, { memory: 64, config: { CFG_FN: 'f', CFG_BOTH: 'fn' } });
    const res = await s.invoke(fn.id, {});
    expect(res.json.env).toEqual({
      FN_FORMAT: 'http-stream',
      FN_LISTENER: 'unix:/tmp/iofs/lsnr.sock',
      FN_APP_ID: app.id,
      FN_APP_NAME: app.name,
      FN_FN_ID: fn.id,
      FN_FN_NAME: fn.name,
      FN_MEMORY: '64',
      FN_TYPE: 'sync',
      CFG_APP: 'a',
      CFG_FN: 'f',
      CFG_BOTH: 'fn',
    });
    expect(res.json.callId).toBe(res.headers.get('fn-call-id'));
    expect(res.json.headers['Fn-Deadline'][0]).toMatch(/^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$/);
    expect(res.json.headers['Content-Type']).toEqual(['application/json']);
  });

  it("starts containers with Fn's hardening: user 1000, no capabilities, read-only root, sized limits", async () => {
    const app = await s.app();
    const fn = await s.fn(app, probe, { memory: 96 });
    const root = await s.invoke(fn.id, { write: '/function/x' });
    expect(root.json.uid).toBe(1000);
    expect(root.json.wrote).toBe('EROFS');
    expect((await s.invoke(fn.id, { write: '/tmp/x' })).json.wrote).toBe(true);
    const [info] = await containersOfFn(fn.id);
    const hc = (await docker().getContainer(info!.Id).inspect()).HostConfig;
    expect(hc.Memory).toBe(96 * 1024 * 1024);
    expect(hc.MemorySwap).toBe(96 * 1024 * 1024);
    expect(hc.CapDrop).toEqual(['ALL']);
    expect(hc.SecurityOpt).toEqual(['no-new-privileges']);
    expect(hc.ReadonlyRootfs).toBe(true);
    expect(hc.PidsLimit).toBe(50);
    expect(hc.Ulimits).toContainEqual({ Name: 'nofile', Soft: 350, Hard: 350 });
  });

  it('answers an unknown image with 502 naming it, and keeps serving other functions', async () => {
    const app = await s.app();
    const broken = await s.fn(app, 'fnts-test/no-such-image:1.0');
    const res = await s.invoke(broken.id, {});
    expect(res.status).toBe(502);
    expect(res.json.message).toContain('fnts-test/no-such-image:1.0');
    const ok = await s.fn(app, hello);
    expect((await s.invoke(ok.id, {})).status).toBe(200);
  });
});
