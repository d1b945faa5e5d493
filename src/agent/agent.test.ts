import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pino } from 'pino';
import { afterEach, describe, expect, it } from 'vitest';
import { FakeDriver, type FakeFunction } from '../drivers/index.js';
import { ApiError, callFn, Changes, newAppFromJson, newFnFromJson, type CallFn, type CallOutcome } from '../models/index.js';
import { Agent } from './agent.js';
import type { AgentConfig } from './settings.js';
import { ManualClock } from './clock.js';
import type { CallResponse } from './protocol/call.js';
import { MB, MemoryCpuTracker } from './resource.js';

const echo: FakeFunction = {
  handle: (_req, body, res) => {
    res.setHeader('Content-Type', 'application/json');
    res.end(JSON.stringify({ got: body.toString() }));
  },
};
const sleepy = (ms: number): FakeFunction => ({ handle: (_req, _body, res) => void setTimeout(() => res.end('done'), ms) });

let agents: Agent[] = [];
let dirs: string[] = [];
afterEach(async () => {
  await Promise.all(agents.map((a) => a.close()));
  for (const d of dirs) rmSync(d, { recursive: true, force: true });
  agents = [];
  dirs = [];
});

function setup(functions: Record<string, FakeFunction>, config: Partial<AgentConfig> = {}, memoryMB = 4096, clock?: ManualClock) {
  const driver = new FakeDriver(functions);
  const dir = mkdtempSync(join(tmpdir(), 'fnts-agent-'));
  dirs.push(dir);
  const changes = new Changes();
  const agent = new Agent({
    driver,
    changes,
    ...(clock ? { clock } : {}),
    resources: new MemoryCpuTracker({ memoryBytes: memoryMB * MB, cpuMillis: 2000 }),
    logger: pino({ level: 'silent' }),
    config: {
      freezeIdleMs: Infinity,
      ejectIdleMs: 1000,
      keepAlivePolicy: 'fixed',
      keepAliveBinMs: 60_000,
      hotPollMs: 50,
      hotStartTimeoutMs: 2000,
      maxResponseBytes: 0,
      maxLogBytes: 1024 * 1024,
      iofsPath: join(dir, 'iofs'),
      owner: 'test',
      instance: 'test',
      containerTag: undefined,
      nonBlockingResources: false,
      launchPolicy: 'adaptive',
      statsIntervalMs: 1000,
      ...config,
    },
  });
  agents.push(agent);
  const app = newAppFromJson({ name: 'app' });
  const spec = (image: string, extra: Record<string, unknown> = {}): CallFn => callFn(app, { ...newFnFromJson({ app_id: app.id, name: image.replace(/\W/g, ''), image, ...extra }), shape: app.shape });
  let n = 0;
  const call = (fn: CallFn, body = '') =>
    agent.invoke(
      { id: `call-${n++}`, type: 'sync', fn, triggerId: undefined, method: 'POST', url: 'http://fnts.test/invoke/x', headers: ['Content-Type', 'text/plain'], createdAt: Date.now() },
      Buffer.from(body),
    ).response;
  return { driver, agent, spec, call, changes };
}

const text = (r: CallResponse) => (r.body as Buffer).toString();

/** Resolves once `what()` holds (checked every turn of the event loop); fails after `ms`. */
const until = async (what: () => boolean, ms = 2000): Promise<void> => {
  const end = Date.now() + ms;
  while (!what()) {
    if (Date.now() > end) throw new Error('condition not met in time');
    await new Promise((r) => setImmediate(r));
  }
};

describe('Agent (fake driver)', () => {
  it('runs calls over the FDK socket and reuses the container', async () => {
    const { driver, agent, spec, call } = setup({ echo });
    await agent.start();
    const s = spec('echo');
    expect(text(await call(s, 'one'))).toBe('{"got":"one"}');
    expect(text(await call(s, 'two'))).toBe('{"got":"two"}');
    expect(driver.containers).toHaveLength(1);
    expect(driver.containers[0]!.calls).toBe(2);
    expect(agent.snapshot().containers).toBe(1);
  });

  it('serves a burst of fast calls with one container, where the seed rule starts one per caller', async () => {
    const fast: FakeFunction = { handle: (_r, _b, res) => void setTimeout(() => res.end('ok'), 2), startMs: 100 };
    for (const [policy, bound] of [
      ['adaptive', 2],
      ['seed', 16],
    ] as const) {
      const { driver, spec, call } = setup({ fast }, { launchPolicy: policy });
      const s = spec('fast');
      await call(s); // measure a run first
      await call(s);
      const results = await Promise.all(Array.from({ length: 16 }, () => call(s)));
      expect(results.every((r) => r.status === 200)).toBe(true);
      if (policy === 'adaptive') expect(driver.containers.length).toBeLessThanOrEqual(bound);
      else expect(driver.containers.length).toBeGreaterThan(4);
    }
  });

  it('plans a burst on a fresh function with the measured start time, the first start included', async () => {
    // 40 calls of 200 ms arrive at once; a start takes 1 s. Planning with the
    // real start time, a handful of containers drain the burst; a guessed
    // 500 ms start (the first measurement thrown away) launched seventeen.
    const burst: FakeFunction = { handle: (_r, _b, res) => void setTimeout(() => res.end('ok'), 200), startMs: 1000 };
    const { driver, spec, call } = setup({ burst }, { hotPollMs: 20 });
    const s = spec('burst');
    const results = await Promise.all(Array.from({ length: 40 }, () => call(s)));
    expect(results.map(text)).toEqual(Array(40).fill('ok'));
    expect(driver.containers.length).toBeGreaterThanOrEqual(2);
    expect(driver.containers.length).toBeLessThanOrEqual(12);
  });

  it('keeps serving and closes when a call listener throws', async () => {
    const { agent, spec, call } = setup({ echo });
    const ended: string[] = [];
    agent.addListener({
      onCallStart: () => {
        throw new Error('listener bug at start');
      },
      onCallEnd: () => {
        throw new Error('listener bug at end');
      },
    });
    agent.addListener({ onCallEnd: (c) => ended.push(c.id) });
    expect(text(await call(spec('echo'), 'still'))).toBe('{"got":"still"}');
    expect(ended).toEqual(['call-0']);
    await agent.close();
  });

  it('scales out for slow calls', async () => {
    const { driver, spec, call } = setup({ slow: sleepy(300) });
    const s = spec('slow');
    await call(s);
    await call(s);
    const t0 = performance.now();
    const results = await Promise.all(Array.from({ length: 6 }, () => call(s)));
    expect(results.map(text)).toEqual(Array(6).fill('done'));
    expect(driver.containers.length).toBeGreaterThanOrEqual(4);
    expect(performance.now() - t0).toBeLessThan(6 * 300);
  });

  it('fails every waiting call with the launch error, naming the image', async () => {
    const { call, spec } = setup({});
    const s = spec('missing:1');
    const results = await Promise.allSettled([call(s), call(s), call(s)]);
    for (const r of results) {
      expect(r.status).toBe('rejected');
      const err = (r as PromiseRejectedResult).reason as ApiError;
      expect(err.status).toBe(502);
      expect(err.message).toContain('missing:1');
    }
  });

  it('answers 504 when the FDK never binds its socket, and removes the container', async () => {
    const { driver, spec, call } = setup({ stuck: { ...echo, neverReady: true } }, { hotStartTimeoutMs: 200 });
    await expect(call(spec('stuck'))).rejects.toMatchObject({ status: 504, code: 'ContainerInitTimeout' });
    expect(driver.live()).toHaveLength(0);
  });

  it('in fail-fast mode answers 503 at once when memory is not free, to the call that caused the launch', async () => {
    const { driver, spec, call } = setup({ slow: sleepy(500), echo }, { nonBlockingResources: true }, 200);
    const busy = call(spec('slow', { memory: 150 }));
    // The slow call holds its memory once its container serves it.
    await until(() => driver.containers.some((c) => c.calls === 1));
    const t0 = performance.now();
    await expect(call(spec('echo', { memory: 100 }))).rejects.toMatchObject({ status: 503, headers: { 'Retry-After': '15' } });
    expect(performance.now() - t0).toBeLessThan(200);
    expect(text(await busy)).toBe('done');
  });

  it('tells listeners when calls start and end', async () => {
    const { agent, spec, call } = setup({ echo });
    const seen: Array<[string, CallOutcome | undefined]> = [];
    agent.addListener({ onCallStart: (c) => seen.push([c.id, undefined]), onCallEnd: (c, o) => seen.push([c.id, o]) });
    await call(spec('echo'));
    expect(seen).toEqual([
      ['call-0', undefined],
      ['call-0', expect.objectContaining({ httpStatus: 200 })],
    ]);
  });

  it('samples a call that outlives the stats interval, and leaves quick calls alone', async () => {
    const { agent, spec, call } = setup({ slow: sleepy(420), echo }, { statsIntervalMs: 50 });
    const records = new Map<string, CallOutcome>();
    agent.addListener({ onCallEnd: (c, o) => records.set(c.id, o) });
    await call(spec('slow'));
    const slow = records.get('call-0')!;
    // Watching starts after one interval, then a reading every interval until the answer.
    expect(slow.stats.length).toBeGreaterThanOrEqual(4);
    expect(slow.stats.length).toBeLessThanOrEqual(8);
    expect(slow.stats[0]!.metrics['mem_usage']).toBeGreaterThan(0);
    await call(spec('echo'));
    expect(records.get('call-1')!.stats).toEqual([]);
  });

  it('takes no readings when stats are disabled', async () => {
    const { agent, spec, call } = setup({ slow: sleepy(200) }, { statsIntervalMs: Infinity });
    const records = new Map<string, CallOutcome>();
    agent.addListener({ onCallEnd: (c, o) => records.set(c.id, o) });
    await call(spec('slow'));
    expect(records.get('call-0')!.stats).toEqual([]);
  });

  it('on close, lets running calls finish, refuses new ones and removes every container', async () => {
    const { driver, agent, spec, call } = setup({ slow: sleepy(300), echo });
    await call(spec('echo'));
    const running = call(spec('slow'));
    await until(() => driver.containers.some((c) => c.spec.image === 'slow' && c.calls === 1));
    const closing = agent.close();
    await expect(call(spec('echo'))).rejects.toMatchObject({ status: 503 });
    expect(text(await running)).toBe('done');
    await closing;
    expect(driver.live()).toHaveLength(0);
  });

  it('retires idle containers of a changed function', async () => {
    const { driver, spec, call, changes } = setup({ echo });
    const s = spec('echo');
    await call(s);
    changes.publish({ kind: 'fn', id: s.fnId, appId: s.appId });
    await until(() => driver.live().length === 0);
  });
});

describe('Agent time and resources (fake driver, manual clock)', () => {
  it('freezes an idle container and retires it at its idle timeout, as the clock moves', async () => {
    const clock = new ManualClock();
    const { driver, spec, call } = setup({ echo }, { freezeIdleMs: 50 }, 4096, clock);
    const s = spec('echo', { idle_timeout: 5 });
    await call(s, 'x');
    expect(driver.live()).toHaveLength(1);
    clock.advance(49);
    expect(driver.live()[0]!.frozen).toBe(false);
    clock.advance(1);
    await until(() => driver.live()[0]!.frozen);
    clock.advance(4949);
    expect(driver.live()).toHaveLength(1);
    clock.advance(1);
    await until(() => driver.live().length === 0);
  });

  it('runs a detached call from the async area only: a fn that fits only with the sync reserve is refused', async () => {
    const { spec, call, agent } = setup({ echo }, {}, 1000);
    const big = spec('echo', { memory: 900 });
    expect(text(await call(big, 'sync'))).toBe('{"got":"sync"}');
    const detached = agent.invoke({ id: 'd1', type: 'detached', fn: big, triggerId: undefined, method: 'POST', url: 'http://fnts.test/invoke/x', headers: [], createdAt: Date.now() }, null);
    await expect(detached.response).rejects.toMatchObject({ status: 400, code: 'CallResourceTooBig' });
    expect(await detached.outcome).toMatchObject({ status: 'error', httpStatus: 400, errorUser: false });
  });

  it("runs a fn's detached calls on the hot container its sync calls left idle, and theirs on its", async () => {
    const { driver, spec, call, agent } = setup({ echo });
    const fn = spec('echo');
    const detached = (id: string) =>
      agent.invoke({ id, type: 'detached', fn, triggerId: undefined, method: 'POST', url: 'http://fnts.test/invoke/x', headers: [], createdAt: Date.now() }, Buffer.from(id)).response;
    expect(text(await call(fn, 'sync'))).toBe('{"got":"sync"}');
    expect(text(await detached('d1'))).toBe('{"got":"d1"}');
    expect(text(await call(fn, 'again'))).toBe('{"got":"again"}');
    expect(driver.containers).toHaveLength(1);
    expect(driver.containers[0]!.calls).toBe(3);
    expect(driver.containers[0]!.spec.env['FN_TYPE']).toBe('sync');
  });

  it('pays a container started for detached calls from the async area only, one a sync call waits for from anywhere', async () => {
    // 1000 MB: 200 kept for sync calls, 800 for both. A 450 MB fn fits once in the async area, twice with the reserve.
    const { driver, spec, agent } = setup({ slow: sleepy(300) }, {}, 1000);
    const fn = spec('slow', { memory: 450 });
    let n = 0;
    const invoke = (type: 'sync' | 'detached') =>
      agent.invoke({ id: `${type}-${n++}`, type, fn, triggerId: undefined, method: 'POST', url: 'http://fnts.test/invoke/x', headers: [], createdAt: Date.now() }, null);
    const first = invoke('detached');
    await until(() => driver.live().length === 1);
    // A second detached call may not take the sync reserve: it waits for the first one's container.
    const second = invoke('detached');
    await Promise.all([first.response, second.response]);
    expect(driver.containers).toHaveLength(1);
    expect(driver.containers[0]!.calls).toBe(2);
    // A sync call beside a busy detached one may: a second container starts for it.
    const busy = invoke('detached');
    await until(() => driver.containers[0]!.calls === 2 && agent.snapshot().queues[0]!.running === 1);
    const sync = invoke('sync');
    await Promise.all([busy.response, sync.response]);
    expect(driver.containers).toHaveLength(2);
  });

  it('evicts as many idle containers as the waiting call needs, and no more', async () => {
    const clock = new ManualClock();
    const { driver, spec, call } = setup({ slow: sleepy(50), echo }, { ejectIdleMs: 100 }, 1000, clock);
    const a = spec('slow', { memory: 300 });
    // Three containers of one fn, busy at once, then idle: 900 MB of 1000 held.
    await Promise.all([call(a), call(a), call(a)]);
    expect(driver.live()).toHaveLength(3);
    clock.advance(100);
    // Another fn needs 700 MB: two of the three must go, and only two.
    const b = call(spec('echo', { memory: 700 }), 'b');
    expect(text(await b)).toBe('{"got":"b"}');
    const live = driver
      .live()
      .map((c) => c.spec.image)
      .sort();
    expect(live).toEqual(['echo', 'slow']);
  });

  it('on a runner, makes room for a call an LB says has waited: idle containers go after FN_EJECT_IDLE_MSECS, not five times that', async () => {
    const clock = new ManualClock();
    const { driver, agent, spec, call } = setup({ slow: sleepy(10), echo }, { ejectIdleMs: 100, nonBlockingResources: true }, 1000, clock);
    const a = spec('slow', { memory: 600 });
    await call(a);
    clock.advance(150);
    const b = spec('echo', { memory: 600 });
    // Refused, and a refusal alone evicts nothing idle for less than 5 x 100 ms.
    await expect(call(b)).rejects.toMatchObject({ status: 503 });
    await new Promise((r) => setTimeout(r, 20));
    expect(driver.live().map((c) => c.spec.image)).toEqual(['slow']);
    // The LB's hint: the idle container goes, and the call after it finds room.
    agent.makeRoom({ id: 'hint', type: 'sync', fn: b, triggerId: undefined, method: 'POST', url: 'http://fnts.test/invoke/x', headers: [], createdAt: Date.now() });
    await until(() => driver.live().length === 0);
    // Its memory is released once the driver has removed it (no clock time passes meanwhile).
    await new Promise((r) => setTimeout(r, 20));
    expect(text(await call(b, 'room'))).toBe('{"got":"room"}');
  });

  it('on a runner, says when it could make room for a refused call: once enough idle containers of other fns pass FN_EJECT_IDLE_MSECS', async () => {
    const clock = new ManualClock();
    const { driver, agent, spec, call } = setup({ slow: sleepy(200), echo }, { ejectIdleMs: 1000, nonBlockingResources: true }, 1000, clock);
    const a = spec('slow', { memory: 600 });
    const b = spec('echo', { memory: 600 });
    const asking = { id: 'ask', type: 'sync' as const, fn: b, triggerId: undefined, method: 'POST', url: 'http://fnts.test/invoke/x', headers: [], createdAt: Date.now() };
    // Room now: nothing to wait for.
    expect(agent.roomIn(asking)).toBe(0);
    // The only container is busy: nobody can say when it frees.
    const busy = call(a);
    await until(() => driver.live().length === 1);
    expect(agent.roomIn(asking)).toBeUndefined();
    await busy;
    // Idle now: it can go once idle FN_EJECT_IDLE_MSECS.
    clock.advance(300);
    expect(agent.roomIn(asking)).toBe(700);
    clock.advance(900);
    expect(agent.roomIn(asking)).toBe(0);
  });

  describe('keep-alive policies', () => {
    /**
     * A fn called every 4.5 s of the clock's time with idle_timeout 3 s,
     * `calls` times; per call: whether it found a container already there,
     * and whether that one was pre-warmed.
     */
    async function rhythm(policy: 'fixed' | 'histogram', calls: number) {
      const clock = new ManualClock();
      const { driver, agent, spec, call } = setup({ echo }, { keepAlivePolicy: policy, keepAliveBinMs: 1000 }, 4096, clock);
      const outcomes: CallOutcome[] = [];
      const prewarms: string[] = [];
      /** Containers of the fn right after each call. */
      const held: number[] = [];
      agent.addListener({ onCallEnd: (_c, o) => void outcomes.push(o), onPrewarm: (_c, result) => void prewarms.push(result) });
      const s = spec('echo', { idle_timeout: 3 });
      for (let i = 0; i < calls; i++) {
        await call(s);
        await until(() => outcomes.length === i + 1);
        held.push(agent.snapshot().containers);
        // The pre-warm (if any) is due at 3.6 s: let its container start before the call at 4.5 s.
        clock.advance(3700);
        await until(() => agent.snapshot().queues.every((q) => q.starting === 0));
        clock.advance(800);
      }
      return { driver, outcomes, prewarms, held, clock };
    }

    /** Six calls of `fn` 4.5 s apart on `clock`: the histogram policy then releases its container after a call and pre-warms one 3.6 s later. */
    async function learn(call: (fn: CallFn) => Promise<CallResponse>, fn: CallFn, clock: ManualClock): Promise<void> {
      for (let i = 0; i < 6; i++) {
        await call(fn);
        if (i < 5) clock.advance(4500);
      }
    }

    it('a pre-warm takes only free memory: it evicts nothing, and is not made when there is no room', async () => {
      const clock = new ManualClock();
      const { driver, agent, spec, call } = setup({ echo, slow: sleepy(1) }, { keepAlivePolicy: 'histogram', keepAliveBinMs: 1000, ejectIdleMs: 0 }, 300, clock);
      const a = spec('echo', { idle_timeout: 3, memory: 128 });
      await learn(call, a, clock);
      await until(() => agent.snapshot().containers === 0);
      // Another fn's idle container holds 256 of the 300 MB when the pre-warm is due.
      await call(spec('slow', { idle_timeout: 60, memory: 256 }));
      clock.advance(3700);
      await new Promise((r) => setTimeout(r, 50));
      expect(driver.live().map((c) => c.spec.image)).toEqual(['slow']);
      expect(agent.snapshot().containers).toBe(1);
    });

    it('the evictor takes a pre-warmed container before one that served calls', async () => {
      const clock = new ManualClock();
      const { driver, agent, spec, call } = setup({ echo, slow: sleepy(1), other: sleepy(1) }, { keepAlivePolicy: 'histogram', keepAliveBinMs: 1000, ejectIdleMs: 0 }, 300, clock);
      const a = spec('echo', { idle_timeout: 3, memory: 128 });
      await learn(call, a, clock);
      // An older idle container of another fn, then echo's pre-warm: 256 of 300 MB held.
      await call(spec('slow', { idle_timeout: 60, memory: 128 }));
      clock.advance(3700);
      await until(() => agent.snapshot().containers === 2 && agent.snapshot().queues.every((q) => q.starting === 0));
      // A third fn needs room for 128 MB: the pre-warmed one goes, though the other has idled longer.
      await call(spec('other', { memory: 128 }));
      expect(
        driver
          .live()
          .map((c) => c.spec.image)
          .sort(),
      ).toEqual(['other', 'slow']);
    });

    it('a fn that changes drops its pending pre-warm (it would start the old definition)', async () => {
      const clock = new ManualClock();
      const { agent, spec, call, changes } = setup({ echo }, { keepAlivePolicy: 'histogram', keepAliveBinMs: 1000 }, 4096, clock);
      const s = spec('echo', { idle_timeout: 3 });
      await learn(call, s, clock);
      expect(agent.keeper.pending).toBe(1);
      changes.publish({ kind: 'fn', id: s.fnId, appId: s.appId });
      expect(agent.keeper.pending).toBe(0);
    });

    it('a pre-warm that fails (the image is gone) fails no call and stops nothing', async () => {
      const clock = new ManualClock();
      const functions: Record<string, FakeFunction> = { echo, slow: sleepy(1) };
      const { agent, spec, call } = setup(functions, { keepAlivePolicy: 'histogram', keepAliveBinMs: 1000 }, 4096, clock);
      const prewarms: string[] = [];
      agent.addListener({ onPrewarm: (_c, r) => void prewarms.push(r) });
      await learn(call, spec('echo', { idle_timeout: 3 }), clock);
      delete functions['echo'];
      clock.advance(3700);
      await until(() => agent.snapshot().queues.every((q) => q.starting === 0));
      await new Promise((r) => setTimeout(r, 20));
      expect(prewarms).toEqual([]);
      expect(text(await call(spec('slow')))).toBe('done');
    });

    it('fixed: a fn called every 4.5 s with idle_timeout 3 s is cold on every call', async () => {
      const { driver, outcomes, held } = await rhythm('fixed', 8);
      expect(held.every((n) => n === 1)).toBe(true);
      expect(driver.containers).toHaveLength(8);
      expect(outcomes.every((o) => o.timings.start_ms !== undefined && !o.timings.prewarmed)).toBe(true);
    });

    it('histogram: after a few calls the same fn is released after each call and pre-warmed before the next, which is warm', async () => {
      const { outcomes, prewarms, held, clock } = await rhythm('histogram', 10);
      const late = outcomes.slice(-3);
      expect(late.map((o) => o.timings.prewarmed)).toEqual([true, true, true]);
      expect(late.every((o) => o.timings.start_ms === undefined)).toBe(true);
      expect(prewarms.filter((r) => r === 'used').length).toBeGreaterThanOrEqual(3);
      expect(prewarms).not.toContain('wasted');
      // Released at once after each of those calls (memory given back): nothing idles until the pre-warm.
      expect(held.slice(-3)).toEqual([0, 0, 0]);
      // The call the last pre-warm expected never comes: it goes when its stay is over, wasted.
      clock.advance(2000);
      await until(() => prewarms.includes('wasted'));
      expect(prewarms.filter((r) => r === 'wasted')).toHaveLength(1);
    });
  });
});
