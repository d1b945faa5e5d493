/**
 * Invoke benchmark: fnts in front of a real hot function (the FDK hello
 * function), against two ceilings measured in the same run with the same
 * load tool: the same function container called directly over its socket,
 * and a bare Node reverse proxy to it (bench/bare-proxy.mjs: what any proxy
 * in Node costs; fnts adds ids, deadlines, lookup, slots, records, metrics).
 * fnts and the bare proxy are measured at 1 connection in turns, so the
 * machine's drift hits both alike (records and metrics on: the defaults).
 *
 *   npm run bench                  (BENCH_SECONDS=10 per measurement by default;
 *                                   BENCH_ONLY=throughput,records,console,keepalive,metrics,tracing,auth picks parts)
 *
 * Prints: throughput and latency at 1 and 16 connections, through fnts and
 * direct, with ratios; how many containers each launch policy started at 16
 * connections; cold start of a new function against `docker run` of the same
 * image to its first answer.
 */
import { execFileSync, spawn, type ChildProcess } from 'node:child_process';
import { createServer, request } from 'node:http';
import type { AddressInfo } from 'node:net';
import { mkdtempSync, rmSync, chmodSync, watch, existsSync, readdirSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { docker, ensureFunctionImage, HELLO_FUNC_JS } from '../test/support/images.js';
import { startFnts, type FntsProcess } from '../test/support/process.js';
import { cannon, consoleStream, fmt, json, median, procStat, type Figures } from './measure.mjs';
import { bearer } from '../test/support/auth.js';

const SECONDS = Number(process.env['BENCH_SECONDS'] ?? 10);
const BODY = JSON.stringify({ name: 'bench' });
/** BENCH_ONLY=records,console,keepalive,metrics,tracing,auth runs only those same-run comparisons (default: everything). */
const ONLY = new Set((process.env['BENCH_ONLY'] ?? '').split(',').filter(Boolean));
const wanted = (part: string): boolean => ONLY.size === 0 || ONLY.has(part);

/** A load run against `url` with the benchmark's body, for SECONDS unless told. */
function load(opts: { url: string; socketPath?: string; connections: number; headers?: Record<string, string>; seconds?: number; pid?: number; method?: 'GET' | 'POST' }): Promise<Figures> {
  const { pid, seconds, ...rest } = opts;
  return cannon({ ...rest, body: BODY, seconds: seconds ?? SECONDS, ...(pid ? { pids: [pid] } : {}) });
}

async function countContainers(label: string): Promise<number> {
  return (await docker().listContainers({ all: true, filters: { label: [label] } })).length;
}

/** Starts the function container by hand (docker run) and resolves with its socket once the FDK is ready. */
async function dockerRun(image: string, dir: string): Promise<{ id: string; socket: string; readyMs: number }> {
  chmodSync(dir, 0o777);
  const socket = join(dir, 'lsnr.sock');
  const t0 = performance.now();
  const ready = new Promise<void>((resolve) => {
    const w = watch(dir, () => {
      if (existsSync(socket)) {
        w.close();
        resolve();
      }
    });
  });
  const id = execFileSync(
    'docker',
    ['run', '-d', '--rm', '-v', `${dir}:/tmp/iofs`, '-e', 'FN_FORMAT=http-stream', '-e', 'FN_LISTENER=unix:/tmp/iofs/lsnr.sock', '--label', 'fnts.bench=direct', image],
    { encoding: 'utf8' },
  ).trim();
  await ready;
  return { id, socket, readyMs: performance.now() - t0 };
}

/** Starts the bare proxy (bench/bare-proxy.mjs) in front of the container's socket. */
async function bareProxy(socket: string): Promise<{ proc: ChildProcess; url: string }> {
  const proc = spawn(process.execPath, [new URL('./bare-proxy.mjs', import.meta.url).pathname, socket], { stdio: ['ignore', 'pipe', 'inherit'] });
  const port = await new Promise<number>((resolve, reject) => {
    proc.stdout!.once('data', (b: Buffer) => resolve(Number(b.toString().trim())));
    proc.once('exit', (code) => reject(new Error(`the bare proxy exited with ${code}`)));
  });
  return { proc, url: `http://127.0.0.1:${port}/` };
}

/** Time from `docker run` to the first answer of the function. */
async function dockerRunFirstAnswer(image: string): Promise<number> {
  const dir = mkdtempSync(join(tmpdir(), 'fnts-bench-'));
  try {
    const t0 = performance.now();
    const { id, socket } = await dockerRun(image, dir);
    const status = await new Promise<number>((resolve, reject) => {
      const req = request({ socketPath: socket, path: '/call', method: 'POST', headers: { 'content-type': 'application/json' } }, (res) => {
        res.resume();
        res.on('end', () => resolve(res.statusCode ?? 0));
      });
      req.on('error', reject);
      req.end(BODY);
    });
    const ms = performance.now() - t0;
    if (status !== 200) throw new Error(`direct call failed: ${status}`);
    execFileSync('docker', ['rm', '-f', id]);
    return ms;
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

/** CPU of each thread of process `pid` so far, in microseconds, keyed by thread id, with its nice value. */
function threadCpu(pid: number): Map<string, { us: number; nice: number }> {
  const out = new Map<string, { us: number; nice: number }>();
  for (const tid of readdirSync(`/proc/${pid}/task`)) {
    try {
      out.set(tid, procStat(`/proc/${pid}/task/${tid}/stat`));
    } catch {
      // the thread ended
    }
  }
  return out;
}

interface AbSide {
  rps: number;
  cpuUs: number;
  /** CPU per call spent by threads running below normal priority (the call record writer). */
  lowPriorityUs: number;
}

interface AbResult {
  on: AbSide;
  off: AbSide;
  costPct: number;
  perRound: number[];
  rounds: number;
}

/**
 * Two servers that differ only in `onEnv` / `offEnv`, each with the hello
 * fn, measured at 1 connection in turns (on, off, on, off, ...), so that
 * the machine's drift between rounds hits both alike; medians are reported.
 * With `alongside` (something done to a server, e.g. a console opened on
 * it) there is one server, measured in turns with it done and undone: two
 * servers differ by more than what is measured then (where their containers
 * and threads landed).
 */
async function abAtOneConnection(
  image: string,
  onEnv: Record<string, string>,
  offEnv: Record<string, string>,
  what: string,
  target: 'invoke' | 'management' = 'invoke',
  alongside?: (serverUrl: string) => Promise<() => void>,
): Promise<AbResult> {
  const rounds = Number(process.env['BENCH_AB_ROUNDS'] ?? 6);
  const seconds = Math.max(3, Math.round(SECONDS / 2));
  const dirs: string[] = [];
  const servers: Array<{ fnts: FntsProcess; url: string }> = [];
  try {
    for (const env of alongside ? [onEnv] : [onEnv, offEnv]) {
      const dataDir = mkdtempSync(join(tmpdir(), 'fnts-bench-'));
      dirs.push(dataDir);
      const fnts = await startFnts({ FN_DB_URL: `sqlite3://${join(dataDir, 'fn.db')}`, FN_LOG_LEVEL: 'info', ...env });
      const app = await json(`${fnts.url}/v2/apps`, { name: 'bench' });
      const fn = await json(`${fnts.url}/v2/fns`, { app_id: app.id, name: 'hello', image });
      // management: GET of an app, with the token (a server with auth off ignores it).
      servers.push({ fnts, url: target === 'invoke' ? `${fnts.url}/invoke/${fn.id}` : `${fnts.url}/v2/apps/${app.id}` });
    }
    const how = target === 'invoke' ? {} : { method: 'GET' as const, headers: bearer() };
    process.stderr.write(`bench: ${what} on and off, 1 connection, ${rounds} rounds of ${seconds} s each in turns...\n`);
    for (const s of servers) await load({ url: s.url, connections: 1, seconds: 3, ...how });
    const sides = [0, 1].map(() => ({ rps: [] as number[], cpuUs: [] as number[], lowUs: [] as number[] }));
    for (let r = 0; r < rounds; r++) {
      for (const i of [0, 1]) {
        const s = servers[alongside ? 0 : i]!;
        const undo = i === 0 ? await alongside?.(s.fnts.url) : undefined;
        const pid = s.fnts.proc.pid!;
        const before = threadCpu(pid);
        const figures = await load({ url: s.url, connections: 1, seconds, pid, ...how }).finally(() => undo?.());
        const calls = Math.max(1, figures.rps * seconds);
        let low = 0;
        for (const [tid, t] of threadCpu(pid)) if (t.nice > 0) low += t.us - (before.get(tid)?.us ?? 0);
        sides[i]!.rps.push(figures.rps);
        sides[i]!.cpuUs.push(figures.cpuUs ?? NaN);
        sides[i]!.lowUs.push(low / calls);
      }
    }
    const side = (i: number): AbSide => ({ rps: median(sides[i]!.rps), cpuUs: median(sides[i]!.cpuUs), lowPriorityUs: median(sides[i]!.lowUs) });
    const perRound = sides[0]!.rps.map((on, r) => (100 * (sides[1]!.rps[r]! - on)) / sides[1]!.rps[r]!);
    return { on: side(0), off: side(1), costPct: median(perRound), perRound, rounds };
  } finally {
    for (const s of servers) await s.fnts.stop();
    for (const d of dirs) rmSync(d, { recursive: true, force: true });
  }
}

async function main(): Promise<void> {
  process.stderr.write('bench: building images...\n');
  const image = await ensureFunctionImage('hello', HELLO_FUNC_JS);
  const rows: string[] = [];
  const say = (line: string): void => {
    rows.push(line);
    process.stdout.write(line + '\n');
  };

  const runs: Record<string, { c1: Figures; c16: Figures; containers: number }> = {};
  let d1: Figures | undefined;
  let d16: Figures | undefined;
  let b16: Figures | undefined;
  let bare: { proc: ChildProcess; url: string } | undefined;
  let direct: { id: string; socket: string; dir: string } | undefined;
  const bareRounds: Array<{ bare: number; fnts: number }> = [];
  if (wanted('throughput')) {
    // ---- the ceilings: the function container alone, over its socket; a bare proxy in front of it
    const dir = mkdtempSync(join(tmpdir(), 'fnts-bench-'));
    direct = { ...(await dockerRun(image, dir)), dir };
    process.stderr.write('bench: direct, 1 and 16 connections...\n');
    await load({ url: 'http://localhost/call', socketPath: direct.socket, connections: 1, seconds: 5 });
    d1 = await load({ url: 'http://localhost/call', socketPath: direct.socket, connections: 1 });
    d16 = await load({ url: 'http://localhost/call', socketPath: direct.socket, connections: 16 });
    bare = await bareProxy(direct.socket);
    process.stderr.write('bench: bare proxy, 16 connections...\n');
    await load({ url: bare.url, connections: 1, seconds: 3 });
    b16 = await load({ url: bare.url, connections: 16, pid: bare.proc.pid! });

    for (const policy of ['adaptive', 'seed'] as const) {
      const dataDir = mkdtempSync(join(tmpdir(), 'fnts-bench-'));
      let fnts: FntsProcess | undefined;
      try {
        fnts = await startFnts({ FN_DB_URL: `sqlite3://${join(dataDir, 'fn.db')}`, FN_LOG_LEVEL: 'info', FNTS_LAUNCH_POLICY: policy });
        const app = await json(`${fnts.url}/v2/apps`, { name: 'bench' });
        const fn = await json(`${fnts.url}/v2/fns`, { app_id: app.id, name: 'hello', image });
        const url = `${fnts.url}/invoke/${fn.id}`;
        process.stderr.write(`bench: fnts (${policy} launcher), 1 and 16 connections...\n`);
        await load({ url, connections: 1, seconds: 5 });
        const pid = fnts.proc.pid;
        const c1 = policy === 'adaptive' ? await load({ url, connections: 1, pid }) : d1!;
        if (policy === 'adaptive' && bare) {
          // fnts and the bare proxy at 1 connection, in turns.
          const rounds = Number(process.env['BENCH_AB_ROUNDS'] ?? 6);
          const seconds = Math.max(3, Math.round(SECONDS / 2));
          process.stderr.write(`bench: fnts and the bare proxy, 1 connection, ${rounds} rounds of ${seconds} s each in turns...\n`);
          for (let r = 0; r < rounds; r++) {
            const b = await load({ url: bare.url, connections: 1, seconds });
            const f = await load({ url, connections: 1, seconds });
            bareRounds.push({ bare: b.rps, fnts: f.rps });
          }
        }
        const c16 = await load({ url, connections: 16, pid });
        runs[policy] = { c1, c16, containers: await countContainers(`fnts.fn_id=${fn.id}`) };

        if (policy === 'adaptive') {
          process.stderr.write('bench: cold starts...\n');
          const cold: number[] = [];
          const base: number[] = [];
          for (let i = 0; i < 5; i++) {
            const f = await json(`${fnts.url}/v2/fns`, { app_id: app.id, name: `cold${i}`, image });
            const t0 = performance.now();
            const res = await fetch(`${fnts.url}/invoke/${f.id}`, { method: 'POST', body: BODY });
            await res.text();
            cold.push(performance.now() - t0);
            base.push(await dockerRunFirstAnswer(image));
          }
          say(`cold start (median of 5): fnts ${fmt(median(cold))} ms, docker run ${fmt(median(base))} ms, ratio ${fmt(median(cold) / median(base), 2)} (goal <= 1.30)`);
        }
      } finally {
        await fnts?.stop();
        rmSync(dataDir, { recursive: true, force: true });
      }
    }
    bare.proc.kill('SIGTERM');
    execFileSync('docker', ['rm', '-f', direct.id]);
    rmSync(direct.dir, { recursive: true, force: true });
  }

  // ---- what keeping call records costs: servers with records on and off, measured in turns
  const records = wanted('records') ? await abAtOneConnection(image, { FNTS_CALL_RECORDS: 'on' }, { FNTS_CALL_RECORDS: 'off' }, 'call records') : undefined;
  // ---- what an open console costs: two live streams read on one server, none on the other
  const consoleOpen = wanted('console')
    ? await abAtOneConnection(image, {}, {}, 'the console (two live streams open, one server in turns)', 'invoke', async (url) => {
        const streams = [await consoleStream(url), await consoleStream(url)];
        return () => streams.forEach((s) => s.stop());
      })
    : undefined;
  // ---- what the histogram keep-alive policy (the default) costs the hot path, against Fn's fixed rule
  const keepAlive = wanted('keepalive') ? await abAtOneConnection(image, { FNTS_KEEPALIVE_POLICY: 'histogram' }, { FNTS_KEEPALIVE_POLICY: 'fixed' }, 'the histogram keep-alive policy') : undefined;
  // ---- what API tokens cost: auth on (the default) against FNTS_AUTH=off, on invoke (a public fn) and on a management call
  const authInvoke = wanted('auth') ? await abAtOneConnection(image, {}, { FNTS_AUTH: 'off' }, 'API tokens, invoke') : undefined;
  const authManagement = wanted('auth') ? await abAtOneConnection(image, {}, { FNTS_AUTH: 'off' }, 'API tokens, GET /v2/apps/{id}', 'management') : undefined;
  // ---- and what metrics and tracing cost (call records off on both sides), spans sent to an OTLP sink in this process
  const sink = createServer((req, res) => {
    req.resume();
    req.on('end', () => res.writeHead(200, { 'content-type': 'application/json' }).end('{}'));
  });
  await new Promise<void>((resolve) => sink.listen(0, '127.0.0.1', resolve));
  const otlp = `http://127.0.0.1:${(sink.address() as AddressInfo).port}`;
  const metricsOnly = wanted('metrics') ? await abAtOneConnection(image, { FNTS_CALL_RECORDS: 'off', FNTS_METRICS: 'on' }, { FNTS_CALL_RECORDS: 'off', FNTS_METRICS: 'off' }, 'metrics') : undefined;
  const metrics = wanted('tracing')
    ? await abAtOneConnection(
        image,
        { FNTS_CALL_RECORDS: 'off', FNTS_METRICS: 'on', OTEL_EXPORTER_OTLP_ENDPOINT: otlp },
        { FNTS_CALL_RECORDS: 'off', FNTS_METRICS: 'off' },
        'metrics and tracing (every call traced)',
      )
    : undefined;
  sink.close();

  const a = runs['adaptive'];
  const s = runs['seed'];
  if (a && s && d1 && d16) {
    say(`direct  1 conn: ${fmt(d1.rps)} req/s  p50 ${d1.p50} ms  p99 ${d1.p99} ms`);
    say(`direct 16 conn: ${fmt(d16.rps)} req/s  p50 ${d16.p50} ms  p99 ${d16.p99} ms`);
    say(`fnts    1 conn: ${fmt(a.c1.rps)} req/s  p50 ${a.c1.p50} ms  p99 ${a.c1.p99} ms  errors ${a.c1.errors + a.c1.non2xx}`);
    say(`fnts   16 conn: ${fmt(a.c16.rps)} req/s  p50 ${a.c16.p50} ms  p99 ${a.c16.p99} ms  errors ${a.c16.errors + a.c16.non2xx}  containers started ${a.containers}`);
    say(`ratio  1 conn: ${fmt((100 * a.c1.rps) / d1.rps, 1)}% of direct (goal >= 40%, aim 50%)`);
    say(`ratio 16 conn: ${fmt((100 * a.c16.rps) / d16.rps, 1)}% of direct`);
    if (b16 && bareRounds.length > 0) {
      const ratios = bareRounds.map((r) => r.fnts / r.bare);
      say(
        `bare proxy 1 conn (${bareRounds.length} rounds in turns with fnts): ${fmt(median(bareRounds.map((r) => r.bare)))} req/s, fnts ${fmt(median(bareRounds.map((r) => r.fnts)))} req/s: ` +
          `fnts at ${fmt(median(ratios), 2)} of the bare proxy (goal >= 0.8; rounds ${ratios.map((x) => fmt(x, 2)).join(', ')})`,
      );
      say(
        `bare proxy 16 conn: ${fmt(b16.rps)} req/s  p99 ${b16.p99} ms, ${fmt(b16.cpuUs ?? NaN)} us CPU per call; fnts ${fmt(a.c16.rps)} req/s p99 ${a.c16.p99} ms (${fmt(a.c16.rps / b16.rps, 2)} of it)`,
      );
    }
    say(`fnts server CPU per call: ${fmt(a.c1.cpuUs ?? NaN)} us at 1 conn, ${fmt(a.c16.cpuUs ?? NaN)} us at 16 conn (less noisy than req/s on a shared machine)`);
  }
  const ab = (label: string, r: AbResult | undefined, extra = ''): void => {
    if (!r) return;
    say(
      `${label} at 1 conn (${r.rounds} rounds in turns): on ${fmt(r.on.rps)} req/s, off ${fmt(r.off.rps)} req/s (medians): ` +
        `cost ${fmt(r.costPct, 1)}% of throughput${extra} (rounds ${r.perRound.map((c) => fmt(c, 1)).join(', ')}); ` +
        `server CPU per call on ${fmt(r.on.cpuUs)} us (${fmt(r.on.lowPriorityUs)} us of it in low-priority threads), off ${fmt(r.off.cpuUs)} us`,
    );
  };
  ab('call records', records, ', goal <= 5%');
  ab('metrics alone', metricsOnly);
  ab('the console, two live streams open', consoleOpen, ', goal <= 2%');
  ab('the histogram keep-alive policy (against fixed)', keepAlive, ', goal: within noise');
  ab('API tokens on invoke', authInvoke, ', goal <= 2%');
  ab('API tokens on management calls', authManagement, ', goal <= 10%');
  ab('metrics and tracing, every call traced', metrics, ', goal <= 5%');
  if (a && s)
    say(`launch policy at 16 conn: adaptive ${a.containers} containers, p99 ${a.c16.p99} ms, ${fmt(a.c16.rps)} req/s; seed ${s.containers} containers, p99 ${s.c16.p99} ms, ${fmt(s.c16.rps)} req/s`);
}

main().then(
  () => process.exit(0),
  (err: unknown) => {
    process.stderr.write(`bench failed: ${err instanceof Error ? err.stack : String(err)}\n`);
    process.exit(1);
  },
);
