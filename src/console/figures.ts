/**
 * The console's figures: what the platform is doing, read from this node's
 * own Prometheus registry (the numbers /metrics shows, so a script scraping
 * /metrics sees the same) and turned into rates and quantiles over the time
 * between two readings.
 *
 * A reading is cumulative (counters, histogram buckets) or a level (gauges);
 * `figuresBetween(a, b)` is what happened from a to b. A figure this node
 * cannot know is null, never 0: an API node runs no calls, a node without
 * metrics (FNTS_METRICS=off) knows nothing.
 */
import type { Registry } from 'prom-client';

/** Container states as the console names them, from the agent's (wait, start, idle, paused, busy). */
export const CONTAINER_STATES = ['starting', 'busy', 'idle', 'paused', 'waiting'] as const;
export type ContainerStateName = (typeof CONTAINER_STATES)[number];
/** The agent's gauge of containers in each state (labelled by app and fn). */
export const STATE_METRIC: Readonly<Record<ContainerStateName, string>> = {
  starting: 'fn_container_start_total',
  busy: 'fn_container_busy_total',
  idle: 'fn_container_idle_total',
  paused: 'fn_container_paused_total',
  waiting: 'fn_container_wait_total',
};

export type ContainerCounts = Record<ContainerStateName, number>;

/** One fn's cumulative counts at a reading. */
interface FnReading {
  readonly appId: string;
  calls: number;
  errors: number;
  coldstarts: number;
  /** Cumulative count of calls at or under each bucket bound (seconds; Infinity last). */
  readonly buckets: Map<number, number>;
  readonly containers: ContainerCounts;
}

/** Everything cumulative or current at one moment. */
export interface Reading {
  /** ms since the epoch. */
  readonly at: number;
  readonly fns: ReadonlyMap<string, FnReading>;
  /** Memory reserved for containers and free for them (bytes); undefined where no agent runs. */
  readonly memory: { readonly used: number; readonly avail: number } | undefined;
  /** Detached calls queued or running; undefined without a queue. */
  readonly backlog: number | undefined;
  /** Detached calls dead-lettered by this node since it started; undefined where no workers run. */
  readonly deadLetters: number | undefined;
}

export interface Quantiles {
  readonly p50: number;
  readonly p95: number;
  readonly p99: number;
}

export interface FnFigures {
  readonly app_id: string;
  readonly fn_id: string;
  readonly calls_per_s: number;
  readonly errors_per_s: number;
  /** The function's time per call, ms (from the histogram's buckets); null when no call ended in the interval. */
  readonly latency_ms: Quantiles | null;
  /** Containers started per call in the interval (0..1); null when no call. */
  readonly cold_share: number | null;
  readonly containers: ContainerCounts;
}

/** What the console shows: rates over `interval_s` up to `at`, levels at `at`. */
export interface Figures {
  readonly at: string;
  /** The seconds the rates are over; null for the first reading (no rates yet). */
  readonly interval_s: number | null;
  readonly calls_per_s: number | null;
  readonly errors_per_s: number | null;
  readonly latency_ms: Quantiles | null;
  readonly cold_share: number | null;
  /** null where no agent runs (an API node). */
  readonly containers: ContainerCounts | null;
  readonly memory: { readonly used_bytes: number; readonly total_bytes: number } | null;
  readonly detached: { readonly backlog: number | null; readonly dead_letters: number | null } | null;
  readonly fns: readonly FnFigures[];
}

interface Sample {
  readonly value: number;
  readonly labels: Readonly<Record<string, string | number | undefined>>;
  readonly metricName?: string;
}

async function samples(registry: Registry, name: string): Promise<readonly Sample[] | undefined> {
  const metric = registry.getSingleMetric(name);
  if (!metric) return undefined;
  const got = (await metric.get()) as { values: Sample[] };
  return got.values;
}

const zeroContainers = (): ContainerCounts => ({ starting: 0, busy: 0, idle: 0, paused: 0, waiting: 0 });

/** Reads the registry once. Never rejects for a missing metric: what is missing reads as unknown. */
export async function readRegistry(registry: Registry, now = Date.now()): Promise<Reading> {
  const fns = new Map<string, FnReading>();
  const fnOf = (s: Sample): FnReading | undefined => {
    const fnId = s.labels['fn_id'];
    if (typeof fnId !== 'string' || fnId === '') return undefined;
    let fn = fns.get(fnId);
    if (!fn) fns.set(fnId, (fn = { appId: String(s.labels['app_id'] ?? ''), calls: 0, errors: 0, coldstarts: 0, buckets: new Map(), containers: zeroContainers() }));
    return fn;
  };
  const add = async (name: string, into: (fn: FnReading, v: number) => void): Promise<void> => {
    for (const s of (await samples(registry, name)) ?? []) {
      const fn = fnOf(s);
      if (fn) into(fn, s.value);
    }
  };
  await add('fn_calls', (fn, v) => (fn.calls += v));
  for (const name of ['fn_errors', 'fn_timeouts', 'fn_server_busy']) await add(name, (fn, v) => (fn.errors += v));
  await add('faas_coldstarts_total', (fn, v) => (fn.coldstarts += v));
  for (const state of CONTAINER_STATES) await add(STATE_METRIC[state], (fn, v) => (fn.containers[state] += v));
  for (const s of (await samples(registry, 'faas_invoke_duration_seconds')) ?? []) {
    if (s.metricName !== 'faas_invoke_duration_seconds_bucket') continue;
    const fn = fnOf(s);
    const le = s.labels['le'] === '+Inf' ? Infinity : Number(s.labels['le']);
    if (fn && !Number.isNaN(le)) fn.buckets.set(le, (fn.buckets.get(le) ?? 0) + s.value);
  }
  const single = async (name: string): Promise<number | undefined> => {
    const values = await samples(registry, name);
    if (values === undefined) return undefined;
    const sum = values.reduce((a, s) => a + s.value, 0);
    return Number.isFinite(sum) ? sum : undefined;
  };
  const used = await single('fn_util_mem_used');
  const avail = await single('fn_util_mem_avail');
  return {
    at: now,
    fns,
    memory: used !== undefined && avail !== undefined ? { used, avail } : undefined,
    backlog: await single('fnts_mq_depth'),
    // Counted by the node whose workers run detached calls; the metric exists wherever a registry does.
    deadLetters: fns.size > 0 || used !== undefined ? await single('fnts_mq_dead_letters_total') : undefined,
  };
}

/**
 * The q-quantile of the calls counted between two cumulative bucket sets,
 * in ms: linear within its bucket, as Prometheus' histogram_quantile; a
 * rank in the +Inf bucket reads as the last finite bound.
 */
export function quantileMs(before: ReadonlyMap<number, number> | undefined, after: ReadonlyMap<number, number>, q: number): number | null {
  const bounds = [...after.keys()].sort((a, b) => a - b);
  const delta = (le: number): number => Math.max(0, (after.get(le) ?? 0) - (before?.get(le) ?? 0));
  const total = bounds.length > 0 ? delta(bounds[bounds.length - 1]!) : 0;
  if (total <= 0) return null;
  const rank = q * total;
  let lower = 0;
  let below = 0;
  for (const le of bounds) {
    const cum = delta(le);
    if (cum >= rank) {
      if (le === Infinity) return lower * 1000;
      const within = cum - below;
      const at = within > 0 ? lower + ((le - lower) * (rank - below)) / within : le;
      return at * 1000;
    }
    lower = le;
    below = cum;
  }
  return lower * 1000;
}

function quantiles(before: ReadonlyMap<number, number> | undefined, after: ReadonlyMap<number, number>): Quantiles | null {
  const p50 = quantileMs(before, after, 0.5);
  if (p50 === null) return null;
  return { p50, p95: quantileMs(before, after, 0.95) ?? p50, p99: quantileMs(before, after, 0.99) ?? p50 };
}

/** Sums buckets of several fns (for the node's own quantiles). */
function mergeBuckets(into: Map<number, number>, from: ReadonlyMap<number, number>): void {
  for (const [le, n] of from) into.set(le, (into.get(le) ?? 0) + n);
}

const round = (n: number, digits = 2): number => Math.round(n * 10 ** digits) / 10 ** digits;

/**
 * What happened between `before` and `after` (rates null without `before`),
 * for the fns `include` keeps (all by default). `runsCalls`: whether this
 * node runs calls at all (else its call figures are unknown, not zero).
 */
export function figuresBetween(before: Reading | undefined, after: Reading, runsCalls: boolean, include: (appId: string) => boolean = () => true): Figures {
  const seconds = before ? (after.at - before.at) / 1000 : 0;
  const rated = seconds > 0;
  const fns: FnFigures[] = [];
  let calls = 0;
  let errors = 0;
  let cold = 0;
  const bucketsBefore = new Map<number, number>();
  const bucketsAfter = new Map<number, number>();
  const containers = zeroContainers();
  for (const [fnId, fn] of after.fns) {
    if (!include(fn.appId)) continue;
    const prev = before?.fns.get(fnId);
    const dCalls = Math.max(0, fn.calls - (prev?.calls ?? 0));
    const dErrors = Math.max(0, fn.errors - (prev?.errors ?? 0));
    const dCold = Math.max(0, fn.coldstarts - (prev?.coldstarts ?? 0));
    calls += dCalls;
    errors += dErrors;
    cold += dCold;
    if (prev) mergeBuckets(bucketsBefore, prev.buckets);
    mergeBuckets(bucketsAfter, fn.buckets);
    for (const s of CONTAINER_STATES) containers[s] += fn.containers[s];
    fns.push({
      app_id: fn.appId,
      fn_id: fnId,
      calls_per_s: rated ? round(dCalls / seconds) : 0,
      errors_per_s: rated ? round(dErrors / seconds) : 0,
      latency_ms: rated ? quantiles(prev?.buckets, fn.buckets) : null,
      cold_share: rated && dCalls > 0 ? round(Math.min(1, dCold / dCalls), 3) : null,
      containers: { ...fn.containers },
    });
  }
  const known = runsCalls && rated;
  return {
    at: new Date(after.at).toISOString(),
    interval_s: rated ? round(seconds, 3) : null,
    calls_per_s: known ? round(calls / seconds) : null,
    errors_per_s: known ? round(errors / seconds) : null,
    latency_ms: known ? quantiles(bucketsBefore, bucketsAfter) : null,
    cold_share: known && calls > 0 ? round(Math.min(1, cold / calls), 3) : null,
    containers: runsCalls ? containers : null,
    memory: after.memory ? { used_bytes: after.memory.used, total_bytes: after.memory.used + after.memory.avail } : null,
    detached: after.backlog === undefined && after.deadLetters === undefined ? null : { backlog: after.backlog ?? null, dead_letters: after.deadLetters ?? null },
    fns,
  };
}
