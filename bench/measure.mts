/**
 * What the benchmarks share: a load run with autocannon (throughput,
 * latency, the servers' CPU per answered call), CPU readings from /proc, a
 * JSON request, a reader of the console's live stream, and the summaries
 * they print.
 */
import { readFileSync } from 'node:fs';
import autocannon from 'autocannon';
import { bearer, withTestToken } from '../test/support/auth.js';

/** What one load run measured; autocannon's latencies are whole milliseconds. */
export interface Figures {
  rps: number;
  p50: number;
  p99: number;
  errors: number;
  non2xx: number;
  /** CPU the server processes spent per answered call, in microseconds (when their pids were given). */
  cpuUs?: number;
  /** The same, for each of the pids in turn. */
  cpuUsEach?: number[];
  /** The share of the machine's CPU time its hypervisor gave to others during the run (see Steal). */
  stealPct: number;
}

/**
 * The CPU time this (virtual) machine was owed but not given during a
 * stretch, as a share of all its CPU time (/proc/stat's steal): at 10-30%
 * a run is slower by about as much, whatever fnts does, so every ratio a
 * bench prints is read beside it.
 */
export class Steal {
  private readonly start = Steal.read();

  private static read(): { steal: number; total: number } {
    const ticks = readFileSync('/proc/stat', 'utf8').split('\n')[0]!.trim().split(/\s+/).slice(1).map(Number);
    return { steal: ticks[7] ?? 0, total: ticks.reduce((a, b) => a + b, 0) };
  }

  /** Percent of the CPU time since this was made. */
  pct(): number {
    const now = Steal.read();
    const total = now.total - this.start.total;
    return total > 0 ? (100 * (now.steal - this.start.steal)) / total : 0;
  }
}

/** User + system CPU so far, in microseconds, and nice value, of a /proc stat file (a process's or a thread's; clock ticks are 1/100 s). */
export function procStat(path: string): { us: number; nice: number } {
  const fields = readFileSync(path, 'utf8').split(') ')[1]!.split(' ');
  return { us: (Number(fields[11]) + Number(fields[12])) * 10_000, nice: Number(fields[16]) };
}

/** User + system CPU of process `pid` so far, in microseconds. */
export function cpuOf(pid: number): number {
  return procStat(`/proc/${pid}/stat`).us;
}

/** POSTs `body` to `url` over `connections` keep-alive connections for `seconds`; `pids` are the servers whose CPU per call is reported. */
export async function cannon(opts: {
  url: string;
  body: string;
  /** POST unless told; a GET sends no body. */
  method?: 'GET' | 'POST';
  seconds: number;
  connections: number;
  socketPath?: string;
  headers?: Record<string, string>;
  pids?: readonly number[];
}): Promise<Figures> {
  const pids = opts.pids ?? [];
  const cpu0 = pids.map(cpuOf);
  const steal = new Steal();
  const result = await autocannon({
    url: opts.url,
    ...(opts.socketPath ? { socketPath: opts.socketPath } : {}),
    method: opts.method ?? 'POST',
    ...(opts.method === 'GET' ? {} : { body: opts.body }),
    headers: { 'content-type': 'application/json', ...opts.headers },
    connections: opts.connections,
    pipelining: 1,
    duration: opts.seconds,
  });
  const figures: Figures = {
    rps: result.requests.average,
    p50: result.latency.p50,
    p99: result.latency.p99,
    errors: result.errors + result.timeouts,
    non2xx: result.non2xx,
    stealPct: steal.pct(),
  };
  if (pids.length > 0) {
    const each = pids.map((pid, i) => (cpuOf(pid) - cpu0[i]!) / Math.max(1, result.requests.total));
    figures.cpuUsEach = each;
    figures.cpuUs = each.reduce((a, b) => a + b, 0);
  }
  return figures;
}

/** The median of each figure over runs (errors summed), CPU per pid where every run has it. */
export function medianFigures(fs: readonly Figures[]): Figures {
  const each = fs[0]?.cpuUsEach;
  return {
    rps: median(fs.map((f) => f.rps)),
    p50: median(fs.map((f) => f.p50)),
    p99: median(fs.map((f) => f.p99)),
    errors: fs.reduce((n, f) => n + f.errors, 0),
    non2xx: fs.reduce((n, f) => n + f.non2xx, 0),
    stealPct: median(fs.map((f) => f.stealPct)),
    ...(fs.every((f) => f.cpuUs !== undefined) ? { cpuUs: median(fs.map((f) => f.cpuUs!)) } : {}),
    ...(each && fs.every((f) => f.cpuUsEach) ? { cpuUsEach: each.map((_, i) => median(fs.map((f) => f.cpuUsEach![i]!))) } : {}),
  };
}

/** GETs `url`, or POSTs `body` as JSON when given; answers the response's JSON. */
export async function json(url: string, body?: unknown): Promise<any> {
  const res = await fetch(
    url,
    body === undefined ? { headers: withTestToken(url) } : { method: 'POST', body: JSON.stringify(body), headers: withTestToken(url, { 'content-type': 'application/json' }) },
  );
  return res.json();
}

/** The q-quantile of `xs` (nearest rank). */
export function quantile(xs: readonly number[], q: number): number {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.max(0, Math.min(s.length - 1, Math.ceil(q * s.length) - 1))]!;
}

/** The middle value of `xs`; the mean of the two middle ones when their number is even. */
export function median(xs: readonly number[]): number {
  const s = [...xs].sort((a, b) => a - b);
  const m = Math.floor(s.length / 2);
  return s.length % 2 === 1 ? s[m]! : (s[m - 1]! + s[m]!) / 2;
}

export const fmt = (n: number, d = 0): string => n.toFixed(d);

/** A script reading the console's live stream (admin token) until stopped; resolves once the first event came. */
export async function consoleStream(url: string): Promise<{ stop: () => void; events: () => number }> {
  const abort = new AbortController();
  const res = await fetch(`${url}/v2/console/stream`, { headers: bearer(), signal: abort.signal });
  if (!res.ok || !res.body) throw new Error(`the stream answered ${res.status}`);
  let events = 0;
  const reader = res.body.getReader();
  const decoder = new TextDecoder();
  const first = (async () => {
    for (;;) {
      const { value, done } = await reader.read();
      if (done) return;
      events += decoder.decode(value).split('\n\n').length - 1;
      if (events > 0) return;
    }
  })();
  await first;
  const rest = (async () => {
    for (;;) {
      const { value, done } = await reader.read();
      if (done) return;
      events += decoder.decode(value).split('\n\n').length - 1;
    }
  })().catch(() => undefined);
  return {
    stop: () => {
      abort.abort();
      void rest;
    },
    events: () => events,
  };
}
