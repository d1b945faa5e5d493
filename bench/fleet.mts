/**
 * Fleet benchmark: fnts as a fleet (an LB, pure runners, an API node, each
 * its own process) against fnts as one process, and the LB's placers
 * against each other, on real containers.
 *
 *   npm run bench:fleet
 *
 * 1. LB path vs full node: the FDK hello function, after warm-up, at 1 and
 *    16 connections, through (a) a full node and (b) an LB + one pure runner
 *    + an API node, measured in turns in the same run (FLEET_ROUNDS rounds of
 *    FLEET_SECONDS each; medians). Prints throughput, p50/p99, the servers'
 *    CPU per call, LB/full at 1 connection (goal >= 0.7) and the LB's p99 at
 *    16 connections (goal < 30 ms).
 * 2. Placers: three pure runners, each with room for FLEET_RUNNER_SLOTS
 *    containers of 128 MB, and one LB per placer (naive, ch, wait), one
 *    after another, each against fresh runners (no container of the previous
 *    placer helps). FLEET_FNS fns of Zipf-like popularity (s = FLEET_ZIPF_S)
 *    each answer after 20-50 ms; the same seeded sequence of FLEET_CALLS calls
 *    is sent by FLEET_CONCURRENCY closed-loop callers to every placer.
 *    Prints containers started (Docker's start events for this run's label),
 *    warm hits (calls that did not start a container: 1 - started/calls),
 *    p50/p99, errors (503s and others), and how the calls and starts fell
 *    on the runners; then whether wait beats ch on p99 and naive on
 *    containers started. The fns' idle_timeout is FLEET_IDLE_TIMEOUT (2 s),
 *    their timeout FLEET_FN_TIMEOUT (10 s); each placer gets at most
 *    FLEET_PLACER_BUDGET seconds (80).
 *
 * FLEET_REPEAT=N repeats part 2's comparison N times, each on fresh fns (new
 * ids, so the consistent-hash homes fall differently: one comparison's p99
 * depends much on them), and sums up how often wait won.
 *
 * 3. For reference, Fn's own LB path against Fn's full node (the Fn
 *    Project's server, ../shared/bin/fnserver), measured as in part 1; the
 *    ratios are printed beside fnts's from part 1. Skipped where ../shared
 *    is absent.
 *
 * FLEET_PART=1, 2 or 3 runs one part alone; FLEET_PART=1,3 those two.
 *
 * Every process and container this run started is removed at the end, on
 * failure and on Ctrl-C (containers carry this run's FN_CONTAINER_LABEL_TAG).
 */
import { createHash } from 'node:crypto';
import { Agent, request } from 'node:http';
import { mkdtempSync, rmSync } from 'node:fs';
import { loadavg, tmpdir } from 'node:os';
import { join } from 'node:path';
import { jumpHash } from '../src/lb/placers.js';
import { probeImage } from '../test/support/functions.js';
import { seededRandom } from '../test/support/random.js';
import { docker, ensureFunctionImage, HELLO_FUNC_JS } from '../test/support/images.js';
import { startFnts, type FntsProcess } from '../test/support/process.js';
import { FNSERVER, fnServerPresent, removeFnContainers, startFnServer, type FnServer } from '../test/support/fnserver.js';
import { cannon, fmt, json, median, medianFigures, quantile, type Figures } from './measure.mjs';

const env = (name: string, fallback: number): number => Number(process.env[name] ?? fallback);
const SECONDS = env('FLEET_SECONDS', 6);
const ROUNDS = env('FLEET_ROUNDS', 2);
const RUNNERS = 3;
const RUNNER_SLOTS = env('FLEET_RUNNER_SLOTS', 4);
const FNS = env('FLEET_FNS', 12);
const ZIPF_S = env('FLEET_ZIPF_S', 1.1);
const CALLS = env('FLEET_CALLS', 800);
const CONCURRENCY = env('FLEET_CONCURRENCY', 10);
const SEED = env('FLEET_SEED', 42);
/** How many times part 2 compares the placers, each time on fresh fns (new ids: the homes fall differently). */
const REPEAT = env('FLEET_REPEAT', 1);
/**
 * The fns' idle_timeout (s). Short, so that containers leave soon on their
 * own: a pure runner (non-blocking resources) refuses a call it has no room
 * for, and makes room only from containers idle five times
 * FN_EJECT_IDLE_MSECS (5 s by default); with Fn's 30 s idle_timeout a
 * placer's run takes much longer.
 */
const IDLE_TIMEOUT_S = env('FLEET_IDLE_TIMEOUT', 2);
/** The fns' timeout (s): also how long an LB goes on placing a call every runner refuses before it answers 503. */
const TIMEOUT_S = env('FLEET_FN_TIMEOUT', 10);
/** No placer gets more than this (s): its callers stop taking new calls then (the calls not sent are reported). */
const PLACER_BUDGET_S = env('FLEET_PLACER_BUDGET', 80);
const PLACERS = ['naive', 'ch', 'wait'] as const;
type PlacerName = (typeof PLACERS)[number];

const HELLO_BODY = JSON.stringify({ name: 'bench' });
/** This run's containers carry fnts.tag=<TAG>: counted by it, and removed by it at the end. */
const TAG = `fleet-bench-${process.pid}-${Date.now().toString(36)}`;
const MB = 1024 * 1024;

const say = (line: string): void => void process.stdout.write(line + '\n');
const note = (line: string): void => void process.stderr.write(`bench: ${line}\n`);

// ------------------------------------------------------------ processes

/** Every fnts process this run started and has not stopped; every data folder it made. */
const live = new Set<FntsProcess>();
const dirs: string[] = [];

/** Starts an fnts process of role `role` with its own data folder (so its own container owner and iofs folder). */
async function fnts(role: 'full' | 'api' | 'lb' | 'pure-runner', extra: Record<string, string> = {}): Promise<FntsProcess & { grpc: string }> {
  const dir = mkdtempSync(join(tmpdir(), 'fnts-fleet-'));
  dirs.push(dir);
  const p = await startFnts({
    FN_NODE_TYPE: role,
    FN_DB_URL: `sqlite3://${join(dir, 'fn.db')}`,
    FN_LOG_LEVEL: 'info',
    FN_CONTAINER_LABEL_TAG: TAG,
    FNTS_DRAIN_TIMEOUT_MSECS: '5000',
    ...(role === 'pure-runner' ? { FN_GRPC_PORT: '0' } : {}),
    ...extra,
  });
  live.add(p);
  const m = /runner protocol serving on :(\d+)/.exec(p.output());
  return Object.assign(p, { grpc: m ? `127.0.0.1:${m[1]}` : '' });
}

/** Stops `procs` (SIGTERM: they drain and remove their containers); reports a process that logged a fault, without throwing. */
async function stop(...procs: Array<FntsProcess | undefined>): Promise<void> {
  await Promise.all(
    procs.map(async (p) => {
      if (!p || !live.has(p)) return;
      live.delete(p);
      try {
        await p.stop();
      } catch (err) {
        note(`a server logged a fault: ${err instanceof Error ? err.message.slice(0, 2000) : String(err)}`);
      }
    }),
  );
}

async function tagged(): Promise<Array<{ Id: string }>> {
  return docker().listContainers({ all: true, filters: { label: [`fnts.tag=${TAG}`] } });
}

/** Waits up to `ms` for this run's containers to be gone (their servers remove them), then removes what is left. */
async function removeContainers(ms = 10_000): Promise<number> {
  const until = Date.now() + ms;
  let left = await tagged();
  while (left.length > 0 && Date.now() < until) {
    await new Promise((r) => setTimeout(r, 200));
    left = await tagged();
  }
  await Promise.all(
    left.map((c) =>
      docker()
        .getContainer(c.Id)
        .remove({ force: true })
        .catch(() => undefined),
    ),
  );
  return left.length;
}

async function cleanup(): Promise<void> {
  await stop(...live);
  const forced = await removeContainers();
  if (forced > 0) note(`removed ${forced} containers the servers left behind`);
  for (const d of dirs.splice(0)) rmSync(d, { recursive: true, force: true });
}

// ------------------------------------------------ part 1: LB path vs full

interface Side {
  c1: Figures[];
  c16: Figures[];
}

/** LB/full throughput at 1 and 16 connections, and the LB's p99 at 16 (ms), as part 1 or 3 measured them. */
interface PathRatios {
  c1: number;
  c16: number;
  p99c16: number;
}

/**
 * `targets` (a full node, and an LB path) measured in turns: warm-up, then
 * ROUNDS rounds of SECONDS at 1 and 16 connections each, in alternating
 * order. Answers the medians per side and connection count.
 */
async function inTurns(targets: Record<'full' | 'lb', { url: string; pids: number[] }>): Promise<Record<'full' | 'lb', Side>> {
  note('warm-up: 3 s at 1 and at 16 connections on each...');
  for (const t of Object.values(targets)) {
    await cannon({ url: t.url, body: HELLO_BODY, connections: 1, seconds: 3 });
    await cannon({ url: t.url, body: HELLO_BODY, connections: 16, seconds: 3 });
  }
  const sides: Record<'full' | 'lb', Side> = { full: { c1: [], c16: [] }, lb: { c1: [], c16: [] } };
  for (let r = 0; r < ROUNDS; r++) {
    const order = r % 2 === 0 ? (['full', 'lb'] as const) : (['lb', 'full'] as const);
    for (const connections of [1, 16] as const) {
      for (const which of order) {
        note(`round ${r + 1}/${ROUNDS}: ${which}, ${connections} connection(s), ${SECONDS} s...`);
        const f = await cannon({ url: targets[which].url, body: HELLO_BODY, connections, seconds: SECONDS, pids: targets[which].pids });
        (connections === 1 ? sides[which].c1 : sides[which].c16).push(f);
      }
    }
  }
  return sides;
}

async function lbVersusFull(): Promise<PathRatios> {
  note('building the hello image...');
  const image = await ensureFunctionImage('hello', HELLO_FUNC_JS);
  note('starting a full node, an API node, a pure runner and an LB...');
  const [full, api, runner] = await Promise.all([fnts('full'), fnts('api'), fnts('pure-runner')]);
  const lb = await fnts('lb', { FN_RUNNER_API_URL: api.url, FN_RUNNER_ADDRESSES: runner.grpc });
  try {
    const fullFn = await json(`${full.url}/v2/fns`, { app_id: (await json(`${full.url}/v2/apps`, { name: 'bench' })).id, name: 'hello', image });
    const apiFn = await json(`${api.url}/v2/fns`, { app_id: (await json(`${api.url}/v2/apps`, { name: 'bench' })).id, name: 'hello', image });
    const targets = {
      full: { url: `${full.url}/invoke/${fullFn.id}`, pids: [full.proc.pid!] },
      lb: { url: `${lb.url}/invoke/${apiFn.id}`, pids: [lb.proc.pid!, runner.proc.pid!, api.proc.pid!] },
    };
    const sides = await inTurns(targets);
    const containers = async (fnId: string): Promise<number> => (await docker().listContainers({ all: true, filters: { label: [`fnts.fn_id=${fnId}`] } })).length;
    const fig = { full: { c1: medianFigures(sides.full.c1), c16: medianFigures(sides.full.c16) }, lb: { c1: medianFigures(sides.lb.c1), c16: medianFigures(sides.lb.c16) } };
    const line = (label: string, c: string, f: Figures): void => {
      const each = f.cpuUsEach!.length > 1 ? ` (LB ${fmt(f.cpuUsEach![0]!)}, runner ${fmt(f.cpuUsEach![1]!)}, API ${fmt(f.cpuUsEach![2]!)})` : '';
      say(`${label} ${c}: ${fmt(f.rps).padStart(5)} req/s  p50 ${f.p50} ms  p99 ${f.p99} ms  errors ${f.errors + f.non2xx}  server CPU ${fmt(f.cpuUs ?? NaN)} us/call${each}`);
    };
    say(
      `== LB path vs full node: FDK hello, medians of ${ROUNDS} rounds of ${SECONDS} s, in turns (load average ${loadavg()
        .map((l) => fmt(l, 1))
        .join(' ')})`,
    );
    line('full node          ', ' 1 conn', fig.full.c1);
    line('full node          ', '16 conn', fig.full.c16);
    line('LB + runner (+ API)', ' 1 conn', fig.lb.c1);
    line('LB + runner (+ API)', '16 conn', fig.lb.c16);
    say(`containers for the hello fn: full node ${await containers(fullFn.id)}, runner ${await containers(apiFn.id)}`);
    const ratio1 = fig.lb.c1.rps / fig.full.c1.rps;
    say(`LB/full at  1 conn: ${fmt(ratio1, 2)} (goal >= 0.7: ${ratio1 >= 0.7 ? 'met' : 'NOT met'})`);
    say(`LB/full at 16 conn: ${fmt(fig.lb.c16.rps / fig.full.c16.rps, 2)}`);
    say(`LB p99 at 16 conn: ${fig.lb.c16.p99} ms (goal < 30 ms: ${fig.lb.c16.p99 < 30 ? 'met' : 'NOT met'})`);
    return { c1: ratio1, c16: fig.lb.c16.rps / fig.full.c16.rps, p99c16: fig.lb.c16.p99 };
  } finally {
    await stop(lb, runner, api, full);
  }
}

// ------------------------------------- part 3: Fn's own LB path, for reference

/**
 * The same measure for the Fn Project's own server (../shared/bin/fnserver):
 * Fn's full node against Fn's LB + one Fn pure runner + Fn's API node, the
 * same function and load, in turns. Skipped where ../shared is absent.
 */
async function fnReference(fnts: PathRatios | undefined): Promise<void> {
  if (!fnServerPresent()) {
    note(`part 3 skipped: Fn's server is not at ${FNSERVER} (a fresh clone has no ../shared)`);
    return;
  }
  const image = await ensureFunctionImage('hello', HELLO_FUNC_JS);
  note("starting Fn's full node, API node, pure runner and LB...");
  const tag = `${TAG}-fn`;
  const servers: FnServer[] = [];
  const fn = async (...args: Parameters<typeof startFnServer>): Promise<FnServer> => {
    const s = await startFnServer(...args);
    servers.push(s);
    return s;
  };
  try {
    const [full, api, runner] = await Promise.all([fn('full', tag), fn('api', tag), fn('pure-runner', tag)]);
    const lb = await fn('lb', tag, { FN_RUNNER_API_URL: api.url, FN_RUNNER_ADDRESSES: runner.grpcAddress! });
    const fullFn = await json(`${full.url}/v2/fns`, { app_id: (await json(`${full.url}/v2/apps`, { name: 'bench' })).id, name: 'hello', image });
    const apiFn = await json(`${api.url}/v2/fns`, { app_id: (await json(`${api.url}/v2/apps`, { name: 'bench' })).id, name: 'hello', image });
    const sides = await inTurns({
      full: { url: `${full.url}/invoke/${fullFn.id}`, pids: [full.pid] },
      lb: { url: `${lb.url}/invoke/${apiFn.id}`, pids: [lb.pid, runner.pid, api.pid] },
    });
    const fig = { full: { c1: medianFigures(sides.full.c1), c16: medianFigures(sides.full.c16) }, lb: { c1: medianFigures(sides.lb.c1), c16: medianFigures(sides.lb.c16) } };
    const line = (label: string, c: string, f: Figures): void =>
      say(`${label} ${c}: ${fmt(f.rps).padStart(5)} req/s  p50 ${f.p50} ms  p99 ${f.p99} ms  errors ${f.errors + f.non2xx}  server CPU ${fmt(f.cpuUs ?? NaN)} us/call`);
    say(`== Fn's own LB path vs Fn's full node (fnserver), the same function and load, medians of ${ROUNDS} rounds of ${SECONDS} s, in turns`);
    line('Fn full node          ', ' 1 conn', fig.full.c1);
    line('Fn full node          ', '16 conn', fig.full.c16);
    line('Fn LB + runner (+ API)', ' 1 conn', fig.lb.c1);
    line('Fn LB + runner (+ API)', '16 conn', fig.lb.c16);
    const c1 = fig.lb.c1.rps / fig.full.c1.rps;
    const c16 = fig.lb.c16.rps / fig.full.c16.rps;
    say(`Fn LB/full at  1 conn: ${fmt(c1, 2)}${fnts ? `   (fnts: ${fmt(fnts.c1, 2)})` : ''}`);
    say(`Fn LB/full at 16 conn: ${fmt(c16, 2)}${fnts ? `   (fnts: ${fmt(fnts.c16, 2)})` : ''}`);
    say(`Fn LB p99 at 16 conn: ${fig.lb.c16.p99} ms${fnts ? `   (fnts: ${fnts.p99c16} ms)` : ''}`);
  } finally {
    await Promise.all(servers.map((s) => s.stop()));
    await removeFnContainers(tag);
  }
}

// ------------------------------------------------------ part 2: placers

/** The fns' popularity, most popular first: p(k) ~ 1 / k^s. */
function zipf(n: number, s: number): number[] {
  const w = Array.from({ length: n }, (_, k) => 1 / (k + 1) ** s);
  const total = w.reduce((a, b) => a + b, 0);
  return w.map((x) => x / total);
}

interface Planned {
  readonly fn: number;
  readonly sleepMs: number;
}

function schedule(): Planned[] {
  const random = seededRandom(SEED);
  const p = zipf(FNS, ZIPF_S);
  return Array.from({ length: CALLS }, () => {
    let u = random();
    let fn = 0;
    while (fn < FNS - 1 && u >= p[fn]!) u -= p[fn++]!;
    return { fn, sleepMs: 20 + Math.floor(random() * 31) };
  });
}

/** Which runner `ch` (and `wait`, before it moves a fn) makes a fn's home: the LB's jump hash of its SHA-1. */
function home(fnId: string, runners: number): number {
  const d = createHash('sha1').update(fnId).digest();
  return jumpHash(d.readUInt32BE(0), d.readUInt32BE(4), runners);
}

interface Answer {
  status: number;
  ms: number;
}

/** One POST over a keep-alive agent; resolves with the status (0 when the connection failed) and the time to the last byte. */
function post(agent: Agent, url: string, body: string): Promise<Answer> {
  const t0 = performance.now();
  return new Promise((resolve) => {
    const req = request(url, { method: 'POST', agent, headers: { 'content-type': 'application/json', 'content-length': Buffer.byteLength(body) } }, (res) => {
      res.resume();
      res.on('end', () => resolve({ status: res.statusCode ?? 0, ms: performance.now() - t0 }));
      res.on('error', () => resolve({ status: 0, ms: performance.now() - t0 }));
    });
    req.on('error', () => resolve({ status: 0, ms: performance.now() - t0 }));
    req.end(body);
  });
}

/**
 * Sends `plan` to `base` with CONCURRENCY callers, each taking the next
 * planned call when its last one answered, until PLACER_BUDGET_S has passed.
 * Answers the calls' answers, in plan order, as far as they were sent.
 */
async function drive(base: string, fnIds: readonly string[], plan: readonly Planned[]): Promise<Answer[]> {
  const agent = new Agent({ keepAlive: true, maxSockets: CONCURRENCY });
  const answers = new Array<Answer>(plan.length);
  const until = performance.now() + PLACER_BUDGET_S * 1000;
  let next = 0;
  await Promise.all(
    Array.from({ length: CONCURRENCY }, async () => {
      while (next < plan.length && performance.now() < until) {
        const i = next++;
        const c = plan[i]!;
        answers[i] = await post(agent, `${base}/invoke/${fnIds[c.fn]}`, JSON.stringify({ sleep: c.sleepMs }));
      }
    }),
  );
  agent.destroy();
  return answers.slice(0, next);
}

/** Sums of a runner's Prometheus counters, by name, over all label sets. */
async function counters(url: string, names: readonly string[]): Promise<Record<string, number>> {
  const text = await (await fetch(`${url}/metrics`)).text();
  const out: Record<string, number> = Object.fromEntries(names.map((n) => [n, 0]));
  for (const line of text.split('\n')) {
    const m = /^([a-z_]+)(\{[^}]*\})? ([0-9.e+-]+)$/.exec(line);
    if (m && m[1]! in out) out[m[1]!]! += Number(m[3]);
  }
  return out;
}

/** Counts Docker's container start events for this run's label until stopped. */
async function countStarts(): Promise<{ stop(): Promise<number> }> {
  const stream = (await docker().getEvents({ filters: { type: ['container'], event: ['start'], label: [`fnts.tag=${TAG}`] } })) as NodeJS.ReadableStream & { destroy(): void };
  let starts = 0;
  let buffered = '';
  stream.on('data', (chunk: Buffer) => {
    buffered += chunk.toString();
    const lines = buffered.split('\n');
    buffered = lines.pop()!;
    starts += lines.filter((l) => l.trim() !== '').length;
  });
  stream.on('error', () => undefined);
  return {
    async stop() {
      // Events are delivered a moment after they happen.
      await new Promise((r) => setTimeout(r, 500));
      stream.destroy();
      return starts;
    },
  };
}

/** A server's log lines at level error or worse (pino's JSON), at most `most`, each cut to 600 characters. */
function errorLines(output: string, most = 3): string[] {
  return output
    .split('\n')
    .filter((l) => /"level":(50|60)/.test(l))
    .slice(0, most)
    .map((l) => l.slice(0, 600));
}

interface PlacerResult {
  placer: PlacerName;
  calls: number;
  started: number;
  startedByMetrics: number;
  p50: number;
  p99: number;
  busy: number;
  /** Answers other than 200 and 503, by status (0: the connection failed). */
  otherErrors: Record<number, number>;
  seconds: number;
  perRunner: Array<{ calls: number; starts: number; refused: number }>;
  idleWhileRefusing: IdleWhileRefusing;
  /** The popularity ranks (0: most popular fn) of the slowest 1% of calls, slowest first. */
  tailFns: number[];
}

const RUNNER_METRICS = ['fn_calls', 'faas_coldstarts_total', 'fn_server_busy'] as const;
/** How often the runners' refusals and idle containers are sampled. */
const SAMPLE_MS = 500;
const STATE_METRICS = ['fn_server_busy', 'fn_container_idle_total', 'fn_container_paused_total'] as const;

/** Of the sampling intervals in which a runner refused calls: how many, and in how many it held idle containers at the interval's end. */
interface IdleWhileRefusing {
  intervals: number;
  withIdle: number;
  /** Mean idle (or frozen) containers of the refusing runner at those intervals' ends. */
  meanIdle: number;
}

/**
 * Samples each runner's refusals and idle containers every `everyMs` until
 * stopped: were calls refused while the runner held idle containers (whose
 * memory an eviction would have freed)?
 */
function sampleIdleWhileRefusing(urls: readonly string[], everyMs = SAMPLE_MS): { stop(): Promise<IdleWhileRefusing> } {
  const out: IdleWhileRefusing = { intervals: 0, withIdle: 0, meanIdle: 0 };
  let idleSum = 0;
  let running = true;
  const loop = (async () => {
    let last = await Promise.all(urls.map((u) => counters(u, STATE_METRICS)));
    while (running) {
      await new Promise((r) => setTimeout(r, everyMs));
      const now = await Promise.all(urls.map((u) => counters(u, STATE_METRICS).catch(() => undefined)));
      now.forEach((c, i) => {
        if (!c || c['fn_server_busy']! <= last[i]!['fn_server_busy']!) return;
        const idle = c['fn_container_idle_total']! + c['fn_container_paused_total']!;
        out.intervals++;
        if (idle > 0) out.withIdle++;
        idleSum += idle;
      });
      last = now.map((c, i) => c ?? last[i]!);
    }
  })();
  return {
    async stop() {
      running = false;
      await loop;
      out.meanIdle = out.intervals > 0 ? idleSum / out.intervals : 0;
      return out;
    },
  };
}

async function placerRun(placer: PlacerName, apiUrl: string, fnIds: readonly string[], plan: readonly Planned[]): Promise<PlacerResult> {
  const runners = await Promise.all(Array.from({ length: RUNNERS }, () => fnts('pure-runner', { FN_MAX_TOTAL_MEMORY_BYTES: String(RUNNER_SLOTS * 128 * MB) })));
  const lb = await fnts('lb', { FN_RUNNER_API_URL: apiUrl, FN_RUNNER_ADDRESSES: runners.map((r) => r.grpc).join(','), FN_PLACER: placer });
  try {
    const starts = await countStarts();
    const sampler = sampleIdleWhileRefusing(runners.map((r) => r.url));
    note(`${placer}: ${plan.length} calls, ${CONCURRENCY} at a time...`);
    const t0 = performance.now();
    const answers = await drive(lb.url, fnIds, plan);
    const seconds = (performance.now() - t0) / 1000;
    const started = await starts.stop();
    const idleWhileRefusing = await sampler.stop();
    const perRunner = await Promise.all(
      runners.map(async (r) => {
        const c = await counters(r.url, RUNNER_METRICS);
        return { calls: c['fn_calls']!, starts: c['faas_coldstarts_total']!, refused: c['fn_server_busy']! };
      }),
    );
    const ms = answers.map((a) => a.ms);
    const slowest = answers.map((a, i) => ({ ms: a.ms, fn: plan[i]!.fn })).sort((a, b) => b.ms - a.ms);
    const result: PlacerResult = {
      tailFns: slowest.slice(0, Math.ceil(answers.length / 100)).map((a) => a.fn),
      placer,
      calls: answers.length,
      started,
      startedByMetrics: perRunner.reduce((n, r) => n + r.starts, 0),
      p50: quantile(ms, 0.5),
      p99: quantile(ms, 0.99),
      busy: answers.filter((a) => a.status === 503).length,
      otherErrors: answers.reduce<Record<number, number>>((m, a) => (a.status !== 200 && a.status !== 503 ? { ...m, [a.status]: (m[a.status] ?? 0) + 1 } : m), {}),
      seconds,
      perRunner,
      idleWhileRefusing,
    };
    note(`${placer}: ${JSON.stringify(result, (_k, v: unknown) => (typeof v === 'number' ? Math.round(v * 10) / 10 : v))}`);
    if (Object.keys(result.otherErrors).length > 0) {
      for (const [name, p] of [['lb', lb], ...runners.map((r, i) => [`runner r${i}`, r] as const)] as const) {
        for (const line of errorLines(p.output())) note(`${placer}: ${name} logged: ${line}`);
      }
    }
    return result;
  } finally {
    // Fresh runners for the next placer: these drain and remove their containers.
    await stop(lb, ...runners);
    const forced = await removeContainers();
    if (forced > 0) note(`${placer}: removed ${forced} containers its runners left behind`);
  }
}

/** One comparison of the placers on fresh fns (new ids, so new homes), printed as a table; answers the placers' results. */
async function placerComparison(apiUrl: string, appId: string, image: string, round: number): Promise<PlacerResult[]> {
  const fnIds: string[] = [];
  for (let i = 0; i < FNS; i++) {
    const fn = await json(`${apiUrl}/v2/fns`, { app_id: appId, name: `r${round}f${i}`, image, memory: 128, timeout: TIMEOUT_S, idle_timeout: IDLE_TIMEOUT_S });
    if (!fn.id) throw new Error(`could not create fn r${round}f${i}: ${JSON.stringify(fn)}`);
    fnIds.push(fn.id);
  }
  const plan = schedule();
  const share = zipf(FNS, ZIPF_S);
  const homes = Array.from({ length: RUNNERS }, () => ({ fns: 0, share: 0 }));
  fnIds.forEach((id, i) => {
    const h = homes[home(id, RUNNERS)]!;
    h.fns++;
    h.share += share[i]!;
  });
  const results: PlacerResult[] = [];
  for (const placer of PLACERS) results.push(await placerRun(placer, apiUrl, fnIds, plan));

  say('');
  say(
    `== placers${REPEAT > 1 ? ` (comparison ${round + 1} of ${REPEAT})` : ''}: ${RUNNERS} pure runners with room for ${RUNNER_SLOTS} containers of 128 MB each; ${FNS} fns, Zipf s=${ZIPF_S} (the most popular ${fmt(100 * share[0]!)}% of calls), ` +
      `20-50 ms each, idle_timeout ${IDLE_TIMEOUT_S} s; the same ${CALLS} calls (seed ${SEED}), ${CONCURRENCY} at a time`,
  );
  say(`ch homes (runner: fns, share of calls): ${homes.map((h, i) => `r${i}: ${h.fns} fns, ${fmt(100 * h.share)}%`).join('; ')}`);
  say('placer  calls  started  warm hits  p50 ms  p99 ms  503s  other errors  seconds  per runner (calls/starts/refusals)');
  for (const r of results) {
    say(
      `${r.placer.padEnd(6)}  ${String(r.calls).padStart(5)}  ${String(r.started).padStart(7)}  ${(fmt(100 * (1 - r.started / r.calls), 1) + '%').padStart(9)}  ${fmt(r.p50).padStart(6)}  ${fmt(r.p99).padStart(6)}  ` +
        `${String(r.busy).padStart(4)}  ${(
          Object.entries(r.otherErrors)
            .map(([st, n]) => `${n}x${st}`)
            .join(',') || '0'
        ).padStart(12)}  ${fmt(r.seconds, 1).padStart(7)}  ${r.perRunner.map((x) => `${x.calls}/${x.starts}/${x.refused}`).join('  ')}` +
        (r.startedByMetrics !== r.started ? `  (runners counted ${r.startedByMetrics} starts)` : ''),
    );
  }
  for (const r of results) {
    const w = r.idleWhileRefusing;
    if (w.intervals > 0) {
      say(
        `${r.placer}: runners refused calls in ${w.intervals} intervals of ${SAMPLE_MS} ms; at the end of ${w.withIdle} of them (${fmt((100 * w.withIdle) / w.intervals)}%) the refusing runner held idle or frozen containers (${fmt(w.meanIdle, 1)} on average)`,
      );
    }
  }
  const by = (p: PlacerName): PlacerResult => results.find((r) => r.placer === p)!;
  const wait = by('wait');
  say(`wait vs ch, p99: ${fmt(wait.p99)} vs ${fmt(by('ch').p99)} ms: ${wait.p99 < by('ch').p99 ? 'wait beats ch' : 'wait does NOT beat ch'}`);
  say(`wait vs naive, containers started: ${wait.started} vs ${by('naive').started}: ${wait.started < by('naive').started ? 'wait beats naive' : 'wait does NOT beat naive'}`);
  return results;
}

async function placers(): Promise<void> {
  note('building the probe image...');
  const image = await probeImage();
  const api = await fnts('api');
  try {
    const app = await json(`${api.url}/v2/apps`, { name: 'placers' });
    const runs: PlacerResult[][] = [];
    for (let round = 0; round < REPEAT; round++) runs.push(await placerComparison(api.url, app.id, image, round));
    if (REPEAT > 1) {
      const of = (p: PlacerName, f: (r: PlacerResult) => number): number[] => runs.map((rs) => f(rs.find((r) => r.placer === p)!));
      const p99 = { ch: of('ch', (r) => r.p99), wait: of('wait', (r) => r.p99) };
      const started = { naive: of('naive', (r) => r.started), wait: of('wait', (r) => r.started) };
      const p99Wins = p99.wait.filter((w, i) => w < p99.ch[i]!).length;
      const startWins = started.wait.filter((w, i) => w < started.naive[i]!).length;
      say('');
      say(`== placers over ${REPEAT} comparisons (fresh fns each, so different homes)`);
      say(
        `wait vs ch, p99: wait lower in ${p99Wins} of ${REPEAT}; medians ${fmt(median(p99.wait))} vs ${fmt(median(p99.ch))} ms (each: ${p99.wait.map((w, i) => `${fmt(w)}/${fmt(p99.ch[i]!)}`).join(', ')})`,
      );
      say(`wait vs naive, containers started: wait fewer in ${startWins} of ${REPEAT}; medians ${median(started.wait)} vs ${median(started.naive)}`);
    }
  } finally {
    await stop(api);
  }
}

async function main(): Promise<void> {
  const t0 = performance.now();
  const parts = (process.env['FLEET_PART'] ?? '1,2,3').split(',').map((p) => p.trim());
  let fntsRatios: PathRatios | undefined;
  if (parts.includes('1')) fntsRatios = await lbVersusFull();
  if (parts.includes('2')) await placers();
  if (parts.includes('3')) await fnReference(fntsRatios);
  note(`done in ${fmt((performance.now() - t0) / 1000)} s`);
}

let exiting = false;
for (const signal of ['SIGINT', 'SIGTERM'] as const) {
  process.on(signal, () => {
    if (exiting) return;
    exiting = true;
    note(`${signal}: stopping the servers and removing this run's containers...`);
    void cleanup().finally(() => process.exit(130));
  });
}

void main()
  .then(
    () => 0,
    (err: unknown) => {
      process.stderr.write(`bench failed: ${err instanceof Error ? err.stack : String(err)}\n`);
      return 1;
    },
  )
  .then(async (code) => {
    await cleanup();
    process.exit(code);
  });
