/**
 * Faults in a real fleet: every node is the real `fnts` binary in a process
 * of its own (an API node, two pure runners, one LB), the runners run real
 * containers, and the faults are what a supervisor or a crash does to a
 * process: SIGTERM and SIGKILL.
 *
 * The function answers with its call id and the token it was sent, and
 * writes `RAN <token>` to stderr when the call arrives. Runners log their
 * containers' output at info level (src/agent/logs.ts), so both runners'
 * logs together tell on which runner, and how often, each call ran.
 *
 * The LB places round robin (FN_PLACER=naive): every runner then takes a
 * share of every burst, so a fault always hits calls, whatever a fn's hash.
 */
import { mkdirSync, rmSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { INSTANCE_LABEL } from '../../src/agent/index.js';
import { containersOfOwner, ownerOf } from '../support/containers.js';
import { docker, ensureFunctionImage } from '../support/images.js';
import { startFnts, type FntsProcess } from '../support/process.js';
import { eventually } from '../support/wait.js';
import { withTestToken } from '../support/auth.js';

const SLEEPER_FUNC_JS = `const fdk = require('@fnproject/fdk');
fdk.handle(async function (input, ctx) {
  process.stderr.write('RAN ' + input.token + '\\n');
  if (input.sleep) await new Promise((r) => setTimeout(r, input.sleep));
  return { callId: ctx.callID, token: input.token };
}, { inputMode: 'json' });
`;

/** A free TCP port on 127.0.0.1, to give a node a port it keeps across restarts. */
function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const s = createServer();
    s.once('error', reject);
    s.listen(0, '127.0.0.1', () => {
      const { port } = s.address() as { port: number };
      s.close(() => resolve(port));
    });
  });
}

interface Answer {
  token: string;
  /** The HTTP status; 0 when the request failed without one. */
  status: number;
  body: any;
}

/** Calls the fn through `url` with a token; never throws (a connection failure is status 0). */
async function call(url: string, fnId: string, token: string, sleep: number): Promise<Answer> {
  try {
    const res = await fetch(`${url}/invoke/${fnId}`, { method: 'POST', body: JSON.stringify({ token, sleep }), headers: { 'content-type': 'application/json' } });
    const text = await res.text();
    let body: unknown = text;
    try {
      body = JSON.parse(text);
    } catch {
      // not JSON: kept as text for the failure message
    }
    return { token, status: res.status, body };
  } catch (err) {
    return { token, status: 0, body: String(err) };
  }
}

/** How often each token ran, from runners' logs of their containers' output. */
function ranCounts(...outputs: string[]): Map<string, number> {
  const counts = new Map<string, number>();
  for (const output of outputs) {
    for (const m of output.matchAll(/"msg":"RAN ([\w-]+)"/g)) counts.set(m[1]!, (counts.get(m[1]!) ?? 0) + 1);
  }
  return counts;
}

const dir = join(tmpdir(), `fnts-faults-${process.pid}`);

/** A pure runner's place in the fleet: its gRPC port and data location stay the same across restarts. */
interface RunnerSlot {
  readonly name: string;
  readonly grpcPort: number;
  /** Not used by the runner (it keeps nothing), but its owner label comes from it: one per runner. */
  readonly dbUrl: string;
  proc: FntsProcess;
}

/** A runner's socket folder: short, for unix socket paths. */
const iofsPath = (name: string): string => join('/tmp', `fnts-faults-${process.pid}-${name}`);

async function startRunner(slot: Omit<RunnerSlot, 'proc'>): Promise<FntsProcess> {
  const proc = await startFnts({
    FN_NODE_TYPE: 'pure-runner',
    FN_GRPC_PORT: String(slot.grpcPort),
    FN_DB_URL: slot.dbUrl,
    FN_IOFS_PATH: iofsPath(slot.name),
    FN_LOG_LEVEL: 'info',
  });
  expect(proc.output()).toContain(`runner protocol serving on :${slot.grpcPort}`);
  return proc;
}

describe('faults in a fleet of real processes: API node, two pure runners, LB', () => {
  let api: FntsProcess;
  let runners: RunnerSlot[];
  let lb: FntsProcess;
  let lbEnv: Record<string, string>;
  let fnId: string;

  /** The LB's URL: its port stays the same across restarts. */
  const lbUrl = (): string => lb.url;

  /**
   * Starts `slot`'s runner again (same gRPC port, same data location) and
   * waits until the LB places a call on it. While a runner is unreachable
   * the LB's channel redials it (every second at most) and the LB places
   * nothing there, so the runner takes calls about a second after it
   * listens; 3 s leaves room for a slow machine. Answers the restart's and
   * the wait's durations.
   */
  let probes = 0;
  async function restartRunner(slot: RunnerSlot): Promise<{ startMs: number; backMs: number }> {
    const t0 = performance.now();
    slot.proc = await startRunner(slot);
    const listening = performance.now();
    const runner = slot.proc;
    const back = await eventually(
      async () => {
        const answers = await Promise.all([0, 1].map(() => call(lbUrl(), fnId, `probe-${probes++}`, 0)));
        expect(answers.map((x) => x.status)).toEqual([200, 200]);
        return ranCounts(runner.output()).size > 0;
      },
      3000,
      50,
    );
    expect(back).toBe(true);
    return { startMs: Math.round(listening - t0), backMs: Math.round(performance.now() - listening) };
  }

  beforeAll(async () => {
    mkdirSync(dir, { recursive: true });
    const [image, grpcA, grpcB, lbPort] = await Promise.all([ensureFunctionImage('sleeper', SLEEPER_FUNC_JS), freePort(), freePort(), freePort()]);
    const slots = [
      { name: 'a', grpcPort: grpcA, dbUrl: `sqlite3://${join(dir, 'a', 'fn.db')}` },
      { name: 'b', grpcPort: grpcB, dbUrl: `sqlite3://${join(dir, 'b', 'fn.db')}` },
    ];
    const [apiProc, ...runnerProcs] = await Promise.all([startFnts({ FN_NODE_TYPE: 'api', FN_DB_URL: `sqlite3://${join(dir, 'api', 'fn.db')}` }), ...slots.map((s) => startRunner(s))]);
    api = apiProc!;
    runners = slots.map((s, i) => ({ ...s, proc: runnerProcs[i]! }));
    lbEnv = {
      FN_NODE_TYPE: 'lb',
      FN_PORT: String(lbPort),
      FN_RUNNER_API_URL: api.url,
      FN_RUNNER_ADDRESSES: runners.map((r) => `127.0.0.1:${r.grpcPort}`).join(','),
      FN_PLACER: 'naive',
    };
    lb = await startFnts(lbEnv);
    const post = async (path: string, body: unknown): Promise<any> => {
      const res = await fetch(`${api.url}${path}`, { method: 'POST', body: JSON.stringify(body), headers: withTestToken(path, { 'content-type': 'application/json' }) });
      expect(res.status).toBe(200);
      return res.json();
    };
    const app = await post('/v2/apps', { name: 'faults' });
    fnId = (await post('/v2/fns', { app_id: app.id, name: 'sleeper', image, timeout: 10 })).id;
  }, 120_000);

  afterAll(async () => {
    // Settled, so that the clean-up below runs whatever a stop reports.
    const stopped = await Promise.allSettled([lb, ...(runners ?? []).map((r) => r.proc), api].filter(Boolean).map((p) => p.stop()));
    // Whatever a failed test left (a killed runner's containers): this file's runners' owners only.
    for (const r of runners ?? []) {
      for (const c of await containersOfOwner(ownerOf(r.dbUrl)))
        await docker()
          .getContainer(c.Id)
          .remove({ force: true })
          .catch(() => undefined);
    }
    for (const r of runners ?? []) rmSync(iofsPath(r.name), { recursive: true, force: true });
    rmSync(dir, { recursive: true, force: true });
    expect(stopped).toEqual(stopped.map(() => ({ status: 'fulfilled', value: 0 })));
  }, 60_000);

  it('SIGTERM drains a runner: its calls in flight finish there, new calls go to the other, it exits 0 and leaves no container', async () => {
    const [a, b] = runners as [RunnerSlot, RunnerSlot];
    const fromA = a.proc.output().length;
    const fromB = b.proc.output().length;
    const ranOnA = (): Map<string, number> => ranCounts(a.proc.output().slice(fromA));
    const ranOnB = (): Map<string, number> => ranCounts(b.proc.output().slice(fromB));

    const inFlight = Array.from({ length: 10 }, (_, i) => call(lbUrl(), fnId, `drain-${i}`, 1500));
    // Every call has arrived in its container (a share on each runner): now they are in flight.
    expect(await eventually(() => ranOnA().size + ranOnB().size === 10, 15_000, 20)).toBe(true);
    const onA = [...ranOnA().keys()];
    expect(onA.length).toBeGreaterThan(0);

    const t0 = performance.now();
    const exited = a.proc.stop('SIGTERM');
    let exitedAt = 0;
    const mark = (): void => void (exitedAt = performance.now());
    exited.then(mark, mark);
    // New calls, one every 50 ms, until the runner has exited; those sent
    // once it said it drains must not run on it.
    const during: Array<Promise<Answer>> = [];
    const afterDrainStarted: string[] = [];
    for (let i = 0; exitedAt === 0 && performance.now() - t0 < 30_000; i++) {
      const token = `during-${i}`;
      if (a.proc.output().includes('draining: new calls are refused')) afterDrainStarted.push(token);
      during.push(call(lbUrl(), fnId, token, 100));
      await new Promise((r) => setTimeout(r, 50));
    }
    expect(await exited).toBe(0);
    const drainMs = performance.now() - t0;

    const answers = [...(await Promise.all(inFlight)), ...(await Promise.all(during))];
    expect(answers.filter((x) => x.status !== 200)).toEqual([]);
    for (const x of answers) expect(x.body.token).toBe(x.token);
    expect(new Set(answers.map((x) => x.body.callId)).size).toBe(answers.length);
    // The calls in flight on the runner finished there, once; none was sent again.
    const ranA = ranOnA();
    const ranB = ranOnB();
    for (const token of onA) {
      expect(ranA.get(token)).toBe(1);
      expect(ranB.has(token)).toBe(false);
    }
    expect(afterDrainStarted.length).toBeGreaterThan(0);
    for (const token of afterDrainStarted) {
      expect(ranA.has(token)).toBe(false);
      expect(ranB.get(token)).toBe(1);
    }
    expect(await containersOfOwner(ownerOf(a.dbUrl))).toEqual([]);
    console.info(
      `drain: ${onA.length} calls in flight on the runner, ${during.length} calls sent during the drain (${afterDrainStarted.length} after it began), SIGTERM to exit ${Math.round(drainMs)} ms`,
    );

    const { startMs, backMs } = await restartRunner(a);
    console.info(`drain: the runner restarted in ${startMs} ms; the LB placed a call on it ${backMs} ms after it listened`);
  }, 60_000);

  it('SIGTERM of a runner under load loses nothing: 12 callers of ~100 ms calls, 3 runs, every call answers 200 and runs once', async () => {
    const WORKERS = 12;
    const TERM_AT_MS = 600;
    const figures: string[] = [];
    for (let run = 0; run < 3; run++) {
      // Each run stops the other runner, so both are tried and each comes back warm.
      const slot = runners[run % 2]!;
      const other = runners[(run + 1) % 2]!;
      const stopped = slot.proc;
      const fromStopped = stopped.output().length;
      const fromOther = other.proc.output().length;
      const answers: Answer[] = [];
      let exitedAt = 0;
      const t0 = performance.now();
      const worker = async (w: number): Promise<void> => {
        // Calls go on until the runner has exited and a little past it, so calls land on every phase of its drain.
        for (let i = 0; exitedAt === 0 || performance.now() - exitedAt < 200; i++) {
          if (performance.now() - t0 > 20_000) break;
          answers.push(await call(lbUrl(), fnId, `term${run}-${w}-${i}`, 80 + Math.floor(Math.random() * 40)));
        }
      };
      const load = Promise.all(Array.from({ length: WORKERS }, (_, w) => worker(w)));
      await new Promise((r) => setTimeout(r, TERM_AT_MS));
      const exited = stopped.stop('SIGTERM');
      const mark = (): void => void (exitedAt = performance.now());
      exited.then(mark, mark);
      const termAt = performance.now();
      expect(await exited).toBe(0);
      await load;
      const ok = answers.filter((x) => x.status === 200);
      const failed = answers.filter((x) => x.status !== 200);
      const seconds = (performance.now() - t0) / 1000;
      figures.push(
        `run ${run + 1}: ${ok.length}/${answers.length} answered 200, ${failed.length} errors, ${(answers.length / seconds).toFixed(0)} calls/s, SIGTERM to exit ${Math.round(exitedAt - termAt)} ms`,
      );
      expect(failed.map((x) => [x.status, typeof x.body === 'object' ? x.body.message : x.body])).toEqual([]);
      for (const x of ok) expect(x.body.token).toBe(x.token);
      // Every call ran once, on one runner or the other.
      const ran = ranCounts(stopped.output().slice(fromStopped), other.proc.output().slice(fromOther));
      expect(ranCounts(stopped.output().slice(fromStopped)).size).toBeGreaterThan(0);
      for (const x of ok) expect(ran.get(x.token)).toBe(1);
      expect(await containersOfOwner(ownerOf(slot.dbUrl))).toEqual([]);
      await restartRunner(slot);
    }
    console.info(`SIGTERM under load:\n  ${figures.join('\n  ')}`);
  }, 90_000);

  it('SIGKILL of a runner under load: at least 90% of the calls answer 200, none runs twice, and the LB uses the restarted runner again', async () => {
    const [a, b] = runners as [RunnerSlot, RunnerSlot];
    const WORKERS = 8;
    const WINDOW_MS = 4000;
    const KILL_AT_MS = 1000;
    const fromB = b.proc.output().length;
    const killed = a.proc;
    const fromA = killed.output().length;

    // Warm: each runner has hot containers for the load, so the kill hits calls that run.
    const warm = await Promise.all(Array.from({ length: WORKERS }, (_, i) => call(lbUrl(), fnId, `warm-${i}`, 100)));
    expect(warm.map((x) => x.status)).toEqual(warm.map(() => 200));
    expect(ranCounts(killed.output().slice(fromA)).size).toBeGreaterThan(0);

    const answers: Answer[] = [];
    const t0 = performance.now();
    const worker = async (w: number): Promise<void> => {
      for (let i = 0; performance.now() - t0 < WINDOW_MS; i++) answers.push(await call(lbUrl(), fnId, `kill-${w}-${i}`, 50 + Math.floor(Math.random() * 50)));
    };
    const load = Promise.all(Array.from({ length: WORKERS }, (_, w) => worker(w)));
    await new Promise((r) => setTimeout(r, KILL_AT_MS));
    const ranBeforeKill = [...ranCounts(killed.output().slice(fromA)).keys()].filter((t) => t.startsWith('kill-')).length;
    expect(await killed.stop('SIGKILL')).toBe(null);
    await load;

    const ok = answers.filter((x) => x.status === 200);
    const share = ok.length / answers.length;
    const failed = answers.filter((x) => x.status !== 200);
    console.info(
      `kill: ${answers.length} calls in ${WINDOW_MS} ms, ${ok.length} answered 200 (${(share * 100).toFixed(1)}%), ` +
        `${ranBeforeKill} ran on the killed runner before the kill; others: ${JSON.stringify(failed.map((x) => [x.status, typeof x.body === 'object' ? x.body.message : x.body]))}`,
    );
    expect(share).toBeGreaterThanOrEqual(0.9);
    expect(ranBeforeKill).toBeGreaterThan(0);
    for (const x of ok) expect(x.body.token).toBe(x.token);
    expect(new Set(ok.map((x) => x.body.callId)).size).toBe(ok.length);
    // No call ran twice; every call answered 200 ran exactly once.
    const ran = ranCounts(killed.output().slice(fromA), b.proc.output().slice(fromB));
    expect([...ran].filter(([, n]) => n > 1)).toEqual([]);
    for (const x of ok) expect(ran.get(x.token)).toBe(1);

    // The killed runner's containers are still there; a runner started on
    // its data location removes them (their instance is dead).
    const owner = ownerOf(a.dbUrl);
    const ofKilled = async (): Promise<number> => (await containersOfOwner(owner)).filter((c) => c.Labels[INSTANCE_LABEL]?.includes(`/${killed.proc.pid}/`)).length;
    expect(await ofKilled()).toBeGreaterThan(0);
    const { startMs, backMs } = await restartRunner(a);
    expect(await ofKilled()).toBe(0);
    console.info(`kill: the runner restarted in ${startMs} ms (removing the killed one's containers); the LB placed a call on it ${backMs} ms after it listened`);
  }, 60_000);

  it('an LB that reaches no runner says so: /ready 503, calls answer 503 at once naming the cause, one log line per runner state change; ready again once a runner listens', async () => {
    const [deadA, deadB] = await Promise.all([freePort(), freePort()]);
    const lonely = await startFnts({ ...lbEnv, FN_PORT: '0', FN_RUNNER_ADDRESSES: `127.0.0.1:${deadA},127.0.0.1:${deadB}` });
    try {
      const ready = async (): Promise<{ status: number; body: any }> => {
        const res = await fetch(`${lonely.url}/ready`);
        return { status: res.status, body: await res.json() };
      };
      // The LB dials its runners at start: it knows before any call that none answers.
      expect(await eventually(async () => (await ready()).status === 503, 5000, 50)).toBe(true);
      expect((await ready()).body).toMatchObject({ status: 'not ready', checks: { runners: expect.stringMatching(/no runner is reachable/) } });

      const t0 = performance.now();
      const answers: Answer[] = [];
      for (let i = 0; i < 20; i++) answers.push(await call(lonely.url, fnId, `lonely-${i}`, 0));
      const perCallMs = (performance.now() - t0) / answers.length;
      expect(answers.map((x) => x.status)).toEqual(answers.map(() => 503));
      expect(answers[0]!.body.message).toMatch(/no runner is reachable/);
      // Fast: not the fn's 10 s timeout (Fn's and the old answer: 503 Timed out - server too busy after it).
      expect(perCallMs).toBeLessThan(500);
      const unreachableLines = (): number =>
        lonely
          .output()
          .split('\n')
          .filter((l) => l.includes('runner unreachable')).length;
      expect(unreachableLines()).toBeLessThanOrEqual(2);

      // A runner comes up on one of the addresses: ready again, calls placed, and that said once with a count.
      const slot = { name: 'late', grpcPort: deadA, dbUrl: `sqlite3://${join(dir, 'late', 'fn.db')}` };
      const late = await startRunner(slot);
      try {
        expect(await eventually(async () => (await ready()).status === 200, 5000, 50)).toBe(true);
        expect(await call(lonely.url, fnId, 'lonely-back', 0)).toMatchObject({ status: 200, body: { token: 'lonely-back' } });
        expect(unreachableLines()).toBeLessThanOrEqual(2);
        // The child's log reaches this process through a pipe: the line may be a moment behind the call.
        expect(await eventually(() => /"failedAttempts":\d+.*runner reachable again/.test(lonely.output()), 3000, 20)).toBe(true);
        console.info(`no runner: ${answers.length} calls answered 503 in ${Math.round(perCallMs)} ms each; ${unreachableLines()} "runner unreachable" lines`);
      } finally {
        expect(await late.stop('SIGTERM')).toBe(0);
        rmSync(iofsPath(slot.name), { recursive: true, force: true });
      }
    } finally {
      expect(await lonely.stop('SIGTERM')).toBe(0);
    }
  }, 60_000);

  it('an LB restarts cleanly: SIGTERM when idle exits 0 and a new one serves at once; a call in flight at SIGTERM completes', async () => {
    expect(await lb.stop('SIGTERM')).toBe(0);
    lb = await startFnts(lbEnv);
    const tFirst = performance.now();
    const first = await call(lbUrl(), fnId, 'lb-first', 0);
    const firstMs = performance.now() - tFirst;
    expect(first).toMatchObject({ status: 200, body: { token: 'lb-first' } });

    const outputs = (): string[] => runners.map((r) => r.proc.output());
    const inFlight = call(lbUrl(), fnId, 'lb-in-flight', 1500);
    expect(await eventually(() => ranCounts(...outputs()).has('lb-in-flight'), 10_000, 20)).toBe(true);
    const t0 = performance.now();
    const exited = lb.stop('SIGTERM');
    expect(await inFlight).toMatchObject({ status: 200, body: { token: 'lb-in-flight' } });
    expect(await exited).toBe(0);
    console.info(`lb: the restarted LB's first call took ${Math.round(firstMs)} ms; SIGTERM with a 1.5 s call in flight to exit ${Math.round(performance.now() - t0)} ms`);

    lb = await startFnts(lbEnv);
    expect(await call(lbUrl(), fnId, 'lb-again', 0)).toMatchObject({ status: 200, body: { token: 'lb-again' } });
  }, 60_000);
});
