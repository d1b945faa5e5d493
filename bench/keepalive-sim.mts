/**
 * The keep-alive simulator: replays invocation traces against the agent's
 * own keep-alive policies (src/agent/keepalive.ts, the code the agent runs)
 * and counts, per fn, cold starts and wasted memory-time (container-seconds
 * spent idle, times the fn's memory), and the policy's decision cost.
 *
 * Traces come from a seeded generator shaped like the public Azure
 * Functions trace of 2019 ("Serverless in the Wild", Shahrad et al., ATC
 * 2020): per-minute invocation counts per function over a day, where many
 * functions are timer-triggered, most are rare (over 45% of applications
 * are invoked at most once an hour, over 80% at most once a minute) and a
 * few are called many times a second. Nothing is downloaded: the same
 * seed gives the same trace. Adversarial traces (perfectly periodic,
 * bursty, a drifting period, a one-off call) test the fallbacks.
 *
 * The model, per fn (fns are independent: memory is not short, as in the
 * paper's simulation): a call takes an idle container when there is one
 * (warm; a pre-warmed one counts as used) or starts a container (cold).
 * When a call ends, the policy decides how long its container stays idle
 * and when to pre-warm; a pre-warm starts a container at its time only if
 * the fn has no idle one (never more than one ahead of demand) and is
 * dropped when a call comes first. Start-up time is not modelled: a
 * pre-warm's margin (10% of the head) is there to cover it.
 */
import { DEFAULT_BIN_MS, FixedKeepAlive, HistogramKeepAlive, type KeepAlivePolicy } from '../src/agent/keepalive.js';
import { seededRandom as random } from '../test/support/random.js';

export const DAY_MS = 24 * 3600_000;
const MIN = 60_000;

/** One function of a trace: its calls' start times (ms, ascending), how long each runs, its memory. */
export interface TraceFn {
  readonly id: string;
  /** What made it (timer, rare, steady, frequent, bursty, periodic, drifting, one-off). */
  readonly kind: string;
  readonly memoryMB: number;
  readonly durationMs: number;
  readonly starts: readonly number[];
}

const pick = <T,>(rnd: () => number, xs: readonly T[]): T => xs[Math.floor(rnd() * xs.length)]!;
const logUniform = (rnd: () => number, lo: number, hi: number): number => lo * (hi / lo) ** rnd();
const exponential = (rnd: () => number, mean: number): number => -Math.log(1 - rnd()) * mean;

/** The Azure trace's memory sizes are mostly small: 128-256 MB, a few of 512 MB or 1 GB. */
const MEMORY = [128, 128, 128, 256, 256, 256, 512, 1024] as const;
/** Timer periods (minutes) as the trace's timer triggers run them. */
const PERIODS = [1, 2, 5, 5, 10, 15, 15, 30, 60, 60, 120, 240, 1440] as const;

/** A Poisson process whose rate follows the day (busiest mid-afternoon, half as busy at night). */
function diurnalPoisson(rnd: () => number, meanGapMs: number, horizon: number): number[] {
  const out: number[] = [];
  let t = exponential(rnd, meanGapMs);
  while (t < horizon) {
    const load = 0.75 + 0.25 * Math.sin(((t / DAY_MS) * 2 - 0.5) * Math.PI);
    if (rnd() < load) out.push(t);
    t += exponential(rnd, meanGapMs * 0.75);
  }
  return out;
}

/**
 * A day of `count` functions shaped like the Azure 2019 trace, whose
 * published shares it follows: 40% timer-triggered (a fixed period from a
 * minute to a day, a few seconds of jitter; the paper: 29% of applications
 * have a timer), 25% rare (Poisson, from once an hour to once a day), 28%
 * steady (a call every 20 s to 20 minutes on average, following the day)
 * and 7% frequent (every 2 to 30 s). About 40% are then called at most once
 * an hour and 85% at most once a minute (the paper: 45% and 81%).
 * Executions take 100 ms to 10 s, log-uniform.
 */
export function azureLikeTrace(seed: number, count: number, horizon = DAY_MS): TraceFn[] {
  const rnd = random(seed);
  const fns: TraceFn[] = [];
  for (let i = 0; i < count; i++) {
    const r = rnd();
    const memoryMB = pick(rnd, MEMORY);
    const durationMs = Math.round(logUniform(rnd, 100, 10_000));
    let kind: string;
    let starts: number[];
    if (r < 0.4) {
      kind = 'timer';
      const period = pick(rnd, PERIODS) * MIN;
      const phase = rnd() * period;
      starts = [];
      for (let t = phase; t < horizon; t += period) starts.push(t + rnd() * 2000);
    } else if (r < 0.65) {
      kind = 'rare';
      starts = diurnalPoisson(rnd, logUniform(rnd, 3600_000, DAY_MS), horizon);
    } else if (r < 0.93) {
      kind = 'steady';
      starts = diurnalPoisson(rnd, logUniform(rnd, 20_000, 20 * MIN), horizon);
    } else {
      kind = 'frequent';
      starts = diurnalPoisson(rnd, logUniform(rnd, 2000, 30_000), horizon);
    }
    if (starts.length === 0) starts = [rnd() * horizon];
    fns.push({ id: `${kind}-${i}`, kind, memoryMB, durationMs, starts });
  }
  return fns;
}

/** The adversarial cases: perfectly periodic, bursty, a drifting period, a one-off call. */
export function adversarialTraces(seed: number, horizon = DAY_MS): TraceFn[] {
  const rnd = random(seed);
  const periodic: number[] = [];
  for (let t = 0; t < horizon; t += 7 * MIN) periodic.push(t);
  const bursty: number[] = [];
  for (let t = exponential(rnd, 40 * MIN); t < horizon; t += exponential(rnd, 40 * MIN)) {
    for (let k = 0; k < 20; k++) bursty.push(t + rnd() * 30_000);
  }
  bursty.sort((a, b) => a - b);
  const drifting: number[] = [];
  // The period drifts from 3 to 25 minutes over the day.
  for (let t = 0; t < horizon; t += (3 + (22 * t) / horizon) * MIN) drifting.push(t);
  return [
    { id: 'periodic-7min', kind: 'periodic', memoryMB: 256, durationMs: 500, starts: periodic },
    { id: 'bursty', kind: 'bursty', memoryMB: 256, durationMs: 2000, starts: bursty },
    { id: 'drifting', kind: 'drifting', memoryMB: 256, durationMs: 500, starts: drifting },
    { id: 'one-off', kind: 'one-off', memoryMB: 256, durationMs: 500, starts: [horizon / 3] },
  ];
}

/** What one fn cost under one policy. */
export interface FnResult {
  readonly id: string;
  readonly calls: number;
  readonly cold: number;
  /** Idle container time x memory, GB-seconds. */
  readonly wastedGbS: number;
  readonly prewarmUsed: number;
  readonly prewarmWasted: number;
}

interface Idle {
  since: number;
  until: number;
  prewarmed: boolean;
}

/** Decision costs, ms: every decide() is timed. */
export class CostMeter {
  private readonly samples: number[] = [];
  private total = 0;
  time<T>(f: () => T): T {
    const t0 = performance.now();
    const out = f();
    const ms = performance.now() - t0;
    this.samples.push(ms);
    this.total += ms;
    return out;
  }
  get count(): number {
    return this.samples.length;
  }
  get mean(): number {
    return this.count ? this.total / this.count : 0;
  }
  /** The 99th percentile (a stray garbage collection or compilation shows as the max, not here). */
  get p99(): number {
    return percentile(
      [...this.samples].sort((a, b) => a - b),
      0.99,
    );
  }
  get max(): number {
    return this.samples.reduce((a, b) => Math.max(a, b), 0);
  }
}

/**
 * Replays one fn's calls under `policy` with the fn's `idleTimeoutMs`,
 * until `horizon` (idle time after it is not counted).
 */
export function simulateFn(fn: TraceFn, policy: KeepAlivePolicy, idleTimeoutMs: number, horizon: number, cost: CostMeter): FnResult {
  const idle: Idle[] = [];
  /** End times of the calls running. */
  const busy: number[] = [];
  let prewarm: { at: number; keepMs: number } | undefined;
  let cold = 0;
  let wastedMs = 0;
  let prewarmUsed = 0;
  let prewarmWasted = 0;
  const expire = (c: Idle, at: number): void => {
    wastedMs += Math.max(0, Math.min(c.until, at, horizon) - c.since);
    if (c.prewarmed) prewarmWasted++;
  };
  /** Drops idle containers whose time is up by `t`. */
  const sweep = (t: number): void => {
    for (let i = idle.length - 1; i >= 0; i--) {
      if (idle[i]!.until <= t) {
        expire(idle[i]!, t);
        idle.splice(i, 1);
      }
    }
  };
  /** Ends the calls and fires the pre-warm due by `t`, in time order. */
  const advance = (t: number): void => {
    for (;;) {
      busy.sort((a, b) => a - b);
      const end = busy[0] ?? Infinity;
      const pw = prewarm?.at ?? Infinity;
      if (Math.min(end, pw) > t) return;
      if (pw < end) {
        sweep(pw);
        // Never more than one container ahead of demand.
        if (idle.length === 0 && busy.length === 0) idle.push({ since: pw, until: pw + prewarm!.keepMs, prewarmed: true });
        prewarm = undefined;
        continue;
      }
      busy.shift();
      sweep(end);
      policy.callEnded(fn.id, end);
      const d = cost.time(() => policy.decide(fn.id, idleTimeoutMs, end));
      if (d.keepMs > 0) idle.push({ since: end, until: end + d.keepMs, prewarmed: false });
      if (d.prewarmInMs !== undefined) prewarm = { at: end + d.prewarmInMs, keepMs: d.prewarmKeepMs };
    }
  };
  for (const t of fn.starts) {
    advance(t);
    sweep(t);
    prewarm = undefined;
    policy.callStarted(fn.id, t);
    const c = idle.pop();
    if (c) {
      wastedMs += t - c.since;
      if (c.prewarmed) prewarmUsed++;
    } else {
      cold++;
    }
    busy.push(t + fn.durationMs);
  }
  advance(horizon);
  for (const c of idle) expire(c, horizon);
  return { id: fn.id, calls: fn.starts.length, cold, wastedGbS: (wastedMs / 1000) * (fn.memoryMB / 1024), prewarmUsed, prewarmWasted };
}

/** A policy to compare: how to make it, and the idle_timeout the fns have. */
export interface PolicyRun {
  readonly label: string;
  readonly make: () => KeepAlivePolicy;
  readonly idleTimeoutMs: number;
}

/** The three the README compares: Fn's default, a long fixed keep-alive, and the histogram (fns with idle_timeout 10 minutes). */
export function standardRuns(binMs = DEFAULT_BIN_MS): PolicyRun[] {
  return [
    { label: 'fixed 30 s', make: () => new FixedKeepAlive(), idleTimeoutMs: 30_000 },
    { label: 'fixed 10 min', make: () => new FixedKeepAlive(), idleTimeoutMs: 10 * MIN },
    { label: 'histogram', make: () => new HistogramKeepAlive({ binMs }), idleTimeoutMs: 10 * MIN },
  ];
}

/** The defaults as they come: every fn at Fn's idle_timeout of 30 s, under each policy. */
export function defaultRuns(binMs = DEFAULT_BIN_MS): PolicyRun[] {
  return [
    { label: 'fixed, idle_timeout 30 s', make: () => new FixedKeepAlive(), idleTimeoutMs: 30_000 },
    { label: 'histogram, idle_timeout 30 s', make: () => new HistogramKeepAlive({ binMs }), idleTimeoutMs: 30_000 },
  ];
}

export interface Summary {
  readonly label: string;
  readonly fns: number;
  readonly calls: number;
  readonly cold: number;
  /** Cold-start share of the fn at each percentile (fns ordered by their share). */
  readonly coldShareAt: Readonly<Record<'p50' | 'p75' | 'p90' | 'p99', number>>;
  readonly wastedGbS: number;
  readonly prewarmUsed: number;
  readonly prewarmWasted: number;
  /** Mean, 99th percentile and max ms per decision. */
  readonly decisionMeanMs: number;
  readonly decisionP99Ms: number;
  readonly decisionMaxMs: number;
  readonly decisions: number;
  readonly perFn: readonly FnResult[];
}

/** The value at percentile `p` (0-1) of sorted `xs` (nearest rank). */
export function percentile(sorted: readonly number[], p: number): number {
  if (sorted.length === 0) return 0;
  return sorted[Math.min(sorted.length - 1, Math.max(0, Math.ceil(p * sorted.length) - 1))]!;
}

export function simulate(trace: readonly TraceFn[], run: PolicyRun, horizon = DAY_MS): Summary {
  const policy = run.make();
  const cost = new CostMeter();
  const perFn = trace.map((fn) => simulateFn(fn, policy, run.idleTimeoutMs, horizon, cost));
  const shares = perFn.map((r) => r.cold / r.calls).sort((a, b) => a - b);
  const sum = (f: (r: FnResult) => number): number => perFn.reduce((a, r) => a + f(r), 0);
  return {
    label: run.label,
    fns: perFn.length,
    calls: sum((r) => r.calls),
    cold: sum((r) => r.cold),
    coldShareAt: { p50: percentile(shares, 0.5), p75: percentile(shares, 0.75), p90: percentile(shares, 0.9), p99: percentile(shares, 0.99) },
    wastedGbS: sum((r) => r.wastedGbS),
    prewarmUsed: sum((r) => r.prewarmUsed),
    prewarmWasted: sum((r) => r.prewarmWasted),
    decisionMeanMs: cost.mean,
    decisionP99Ms: cost.p99,
    decisionMaxMs: cost.max,
    decisions: cost.count,
    perFn,
  };
}

const pct = (x: number): string => `${(100 * x).toFixed(1)}%`;

/** The summaries as a Markdown table. */
export function table(summaries: readonly Summary[]): string {
  const rows = [
    '| policy | cold starts | cold share p50 fn | p75 fn | p90 fn | wasted memory-time (GB-h) | pre-warms used / wasted | decision mean / p99 / max |',
    '| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |',
  ];
  for (const s of summaries) {
    rows.push(
      `| ${s.label} | ${s.cold} of ${s.calls} | ${pct(s.coldShareAt.p50)} | ${pct(s.coldShareAt.p75)} | ${pct(s.coldShareAt.p90)} | ${(s.wastedGbS / 3600).toFixed(1)} | ${s.prewarmUsed} / ${s.prewarmWasted} | ${(s.decisionMeanMs * 1000).toFixed(1)} µs / ${(s.decisionP99Ms * 1000).toFixed(1)} µs / ${s.decisionMaxMs.toFixed(2)} ms |`,
    );
  }
  return rows.join('\n');
}
