/**
 * A full node (the real `fnts` binary) whose Docker engine fails at each
 * step of a container's life, one step at a time: its DOCKER_HOST is a
 * proxy in front of the real engine that breaks the step's requests
 * (test/support/faulty-engine.ts). Whatever the engine does, the call that
 * met the failure gets Fn's error in Fn's shape, the process stays up (it
 * logs no uncaught exception or unhandled rejection), the next call
 * succeeds once the engine works again, and no container is left behind.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { caller, poster } from '../support/server.js';
import { containersOfOwner, ownerOf } from '../support/containers.js';
import { FaultyEngine, type EngineFault, type EngineStep } from '../support/faulty-engine.js';
import { probeImage } from '../support/functions.js';
import { docker } from '../support/images.js';
import { startFnts, type FntsProcess } from '../support/process.js';
import { eventually } from '../support/wait.js';

describe("a full node whose Docker engine fails at one step of a container's life", () => {
  let engine: FaultyEngine;
  let server: FntsProcess;
  let dir: string;
  let dbUrl: string;
  let image: string;
  let appId: string;
  let call: ReturnType<typeof caller>;
  let post: ReturnType<typeof poster>;
  let n = 0;

  beforeAll(async () => {
    [engine, image] = await Promise.all([FaultyEngine.start(), probeImage()]);
    dir = mkdtempSync(join(tmpdir(), 'fnts-engine-faults-'));
    dbUrl = `sqlite3://${join(dir, 'fn.db')}`;
    server = await startFnts({ DOCKER_HOST: `unix://${engine.socketPath}`, FN_DB_URL: dbUrl, FNTS_STATS_INTERVAL_MSECS: '100', FN_LOG_LEVEL: 'info' });
    call = caller(server.url);
    post = poster(call);
    appId = (await post('/v2/apps', { name: 'engine-faults' })).id;
  }, 60_000);

  afterAll(async () => {
    engine?.clear();
    const code = await server?.stop();
    expect(code).toBe(0);
    expect(await containersOfOwner(ownerOf(dbUrl))).toEqual([]);
    await engine?.close();
    for (const t of tags)
      await docker()
        .getImage(t)
        .remove()
        .catch(() => undefined);
    rmSync(dir, { recursive: true, force: true });
  }, 60_000);

  /** Tags of the probe image made for a case, removed after. */
  const tags: string[] = [];
  /**
   * A new fn: its first call needs a new container. With `freshImage`, under
   * a tag of the probe image the server has not seen (it keeps what it
   * learnt of an image), so the call asks the engine about it.
   */
  const newFn = async (freshImage = false): Promise<string> => {
    let ref = image;
    if (freshImage) {
      const [repo] = image.split(':');
      ref = `${repo}:fault-${process.pid}-${n + 1}`;
      await docker()
        .getImage(image)
        .tag({ repo: repo!, tag: ref.split(':')[1]! });
      tags.push(ref);
    }
    return (await post('/v2/fns', { app_id: appId, name: `f${++n}`, image: ref, timeout: 10 })).id;
  };
  const invoke = (fnId: string, body: unknown = {}) => call(`/invoke/${fnId}`, { body, headers: { 'content-type': 'application/json' } });
  /** The function's answer, or Fn's error in Fn's shape: never a dropped connection. */
  const answered = (res: Awaited<ReturnType<typeof invoke>>): void => {
    if (res.status === 200) expect(res.json?.callId, res.text).toBeTypeOf('string');
    else {
      expect(res.status, res.text).toBeGreaterThanOrEqual(500);
      expect(res.json?.message, res.text).toBeTypeOf('string');
    }
  };
  /** The server answers, and a call needing a new container works again. */
  const stillServes = async (): Promise<void> => {
    engine.clear();
    expect((await call('/health', { method: 'GET' })).status).toBe(200);
    const res = await invoke(await newFn(), { sleep: 1 });
    expect(res.status, res.text).toBe(200);
  };

  // Steps a call cannot do without: the call fails with Fn's error, in Fn's shape.
  it.each<[EngineStep, EngineFault, RegExp]>([
    ['inspect-image', 'redirect', /^Failed to pull image|^Docker engine error/],
    ['inspect-image', 'reset', /^Docker engine error/],
    ['create', 'reset', /^Docker engine error/],
    ['create', 'error', /^Docker engine error/],
    ['attach', 'reset', /^Docker engine error/],
    ['start', 'reset', /^Docker engine error|^Container failed to initialize/],
    ['start', 'error', /^Container failed to initialize/],
  ])(
    "%s fails (%s): the call gets Fn's error, the server goes on",
    async (step, fault, message) => {
      const fnId = await newFn(step === 'inspect-image');
      engine.inject(step, fault);
      const res = await invoke(fnId);
      expect(res.status, res.text).toBeGreaterThanOrEqual(500);
      expect(res.json?.message, res.text).toMatch(message);
      await stillServes();
    },
    30_000,
  );

  // Steps beside the call: the call may end either way, never the server.
  it.each<[EngineStep, EngineFault]>([
    ['wait', 'reset'],
    ['wait', 'cut'],
    ['stats', 'reset'],
    ['stats', 'cut'],
    ['pause', 'reset'],
  ])(
    '%s fails (%s): the call answers, the server goes on',
    async (step, fault) => {
      const fnId = await newFn();
      engine.inject(step, fault);
      answered(await invoke(fnId, { sleep: 300 }));
      // Idle long enough to be frozen (FN_FREEZE_IDLE_MSECS 50 ms), then called again.
      await new Promise((r) => setTimeout(r, 200));
      answered(await invoke(fnId, { sleep: 1 }));
      await stillServes();
    },
    30_000,
  );

  it('unpause fails: the call waiting for the frozen container gets an answer, the server goes on', async () => {
    const fnId = await newFn();
    expect((await invoke(fnId)).status).toBe(200);
    // Frozen once idle for FN_FREEZE_IDLE_MSECS.
    expect(await eventually(() => (engine.hits.get('pause') ?? 0) > 0, 5000, 20)).toBe(true);
    engine.inject('unpause', 'reset');
    const res = await invoke(fnId, { sleep: 1 });
    answered(res);
    await stillServes();
  }, 30_000);

  it("inspect fails after a container exits: the call gets the exit's error, the server goes on", async () => {
    const fnId = await newFn();
    engine.inject('inspect', 'reset');
    const res = await invoke(fnId, { exit: 3 });
    expect(res.status, res.text).toBe(502);
    expect(res.json?.message, res.text).toMatch(/container exited|function failed|error receiving function response/);
    await stillServes();
  }, 30_000);

  it('remove fails: the container is removed once the engine works again', async () => {
    const fnId = await newFn();
    expect((await invoke(fnId)).status).toBe(200);
    const owner = ownerOf(dbUrl);
    const ofFn = async (): Promise<number> => (await containersOfOwner(owner)).filter((c) => c.Labels['fnts.fn_id'] === fnId).length;
    expect(await ofFn()).toBe(1);
    engine.inject('remove', 'error');
    // A changed fn: its idle container is retired, and the engine refuses to remove it.
    const changed = await call(`/v2/fns/${fnId}`, { method: 'PUT', body: { config: { CHANGED: '1' } }, headers: { 'content-type': 'application/json' } });
    expect(changed.status).toBe(200);
    expect(await eventually(() => (engine.hits.get('remove') ?? 0) >= 2, 10_000, 20)).toBe(true);
    expect(await ofFn()).toBe(1);
    engine.clear();
    // Tried again every few seconds until it is gone.
    expect(await eventually(async () => (await ofFn()) === 0, 15_000, 200)).toBe(true);
    await stillServes();
  }, 40_000);
});
