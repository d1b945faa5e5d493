/**
 * Container starts that fail or take long: the waiting call hears what
 * happened to the start made for it, in Fn's words, and the server keeps
 * serving (the suite fails on any unhandled rejection, which is how a
 * failed start used to end the process).
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { containersOfFn } from '../support/containers.js';
import { missingEntrypointImage, probeImage } from '../support/functions.js';
import { startTestServer, type TestServer } from '../support/server.js';
import { eventually } from '../support/wait.js';

let probe: string;
let noEntrypoint: string;
beforeAll(async () => {
  [probe, noEntrypoint] = await Promise.all([probeImage(), missingEntrypointImage()]);
});

describe('a container that cannot start', () => {
  const START_TIMEOUT_MS = 400;
  let s: TestServer;
  beforeAll(async () => {
    s = await startTestServer({ FN_HOT_START_TIMEOUT_MSECS: String(START_TIMEOUT_MS) });
  });
  afterAll(async () => {
    await s?.close();
  });

  it('answers 502 Container failed to initialize naming the cause, removes it, and keeps serving past the start timeout', async () => {
    const app = await s.app();
    const broken = await s.fn(app, noEntrypoint);
    const fine = await s.fn(app, probe);
    const res = await s.invoke(broken.id, {});
    expect(res.status).toBe(502);
    expect(res.json.message).toMatch(/^Container failed to initialize, please ensure you are using the latest fdk and check the logs \(.*not-there.*\)$/);
    expect(await eventually(async () => (await containersOfFn(broken.id)).length === 0, 3000)).toBe(true);
    // A call that outlasts the start timeout (its own start, then as long again):
    // the failed start left nothing armed behind.
    const later = await s.invoke(fine.id, { sleep: START_TIMEOUT_MS });
    expect(later.status).toBe(200);
    expect((await s.invoke(broken.id, {})).status).toBe(502);
  });
});

describe('a container start slower than FN_HOT_START_TIMEOUT_MSECS', () => {
  let s: TestServer;
  beforeAll(async () => {
    // No FDK binds its socket within 1 ms of its container starting.
    s = await startTestServer({ FN_HOT_START_TIMEOUT_MSECS: '1' });
  });
  afterAll(async () => {
    await s?.close();
  });

  it('answers 504 Container initialization timed out to every waiting call, removes the containers, and keeps serving', async () => {
    const app = await s.app();
    const fn = await s.fn(app, probe);
    const answers = await Promise.all(Array.from({ length: 6 }, () => s.invoke(fn.id, {})));
    for (const res of answers) {
      expect(res.status).toBe(504);
      expect(res.json).toEqual({ message: 'Container initialization timed out, please ensure you are using the latest fdk and check the logs' });
    }
    expect(await eventually(async () => (await s.containers()).length === 0, 3000)).toBe(true);
    expect((await s.call('/version', { method: 'GET' })).status).toBe(200);
  });
});

describe('a call whose container is started for it', () => {
  let s: TestServer;
  beforeAll(async () => {
    s = await startTestServer({ FN_HOT_START_TIMEOUT_MSECS: '1500' });
  });
  afterAll(async () => {
    await s?.close();
  });

  it('hears the start\'s timeout (504), not "server too busy", when the FDK never binds and the slot deadline comes first', async () => {
    const app = await s.app();
    // timeout 1 s: the slot deadline (0.5 s) passes long before the start timeout (1.5 s).
    const fn = await s.fn(app, probe, { timeout: 1, config: { MODE: 'never-ready' } });
    const res = await s.invoke(fn.id, {});
    expect(res.status).toBe(504);
    expect(res.json).toEqual({ message: 'Container initialization timed out, please ensure you are using the latest fdk and check the logs' });
    expect(res.headers.get('retry-after')).toBeNull();
    expect(res.ms).toBeGreaterThan(1400);
  });

  it('gets that container, and its full timeout to run, when it becomes ready after the slot deadline', async () => {
    const app = await s.app();
    const fn = await s.fn(app, probe, { timeout: 1, config: { MODE: 'slow-ready', READY_AFTER_MS: '900' } });
    const res = await s.invoke(fn.id, { sleep: 600, who: 'first' });
    expect(res.status).toBe(200);
    expect(res.json.body).toEqual({ sleep: 600, who: 'first' });
  });
});
