/**
 * The Prometheus metrics every role serves at `GET /metrics`.
 *
 * Fn's names where Fn has one (fn_calls, fn_queued, ..., fn_api_latency), so
 * existing Fn dashboards and alerts keep working; what no peer emits under
 * names of ours (faas_* after OpenTelemetry's FaaS conventions, fnts_*).
 * Labels are bounded: app and fn ids, typed reasons and statuses, route
 * templates; never messages.
 *
 * The per-call series cost a call a few additions: each fn version's cells
 * are looked up once (series.ts). Gauges of state kept elsewhere (resources,
 * the queue) are read when Prometheus scrapes.
 *
 * deploy/grafana/fnts-dashboard.json and deploy/prometheus/alerts.yml use
 * these names; test/deploy checks they exist.
 */
import { collectDefaultMetrics, Gauge, Registry } from 'prom-client';
import type { CallListener, ContainerListener, ContainerRef, ContainerState, PrewarmResult, ResourceTracker, RetireReason } from '../agent/index.js';
import type { Call, CallFn, CallOutcome, CallStatus } from '../models/index.js';
import type { Queue } from '../mq/index.js';
import { CellHistogram, CellMetric, type Cell, type HistogramCell } from './series.js';

const FN = ['app_id', 'fn_id'] as const;
/** Seconds: from a millisecond call to a long one. */
const DURATION_BUCKETS = [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300];
/** Milliseconds, as Fn's api_latency. */
const API_LATENCY_MS = [1, 2, 5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10000, 30000];
const STATES: readonly ContainerState[] = ['wait', 'start', 'idle', 'paused', 'busy', 'prewarmed'];
const STATUSES: readonly CallStatus[] = ['success', 'error', 'timeout', 'cancelled'];
const DOCKER_STATS = ['cpu_user', 'cpu_total', 'cpu_kernel', 'mem_limit', 'mem_usage', 'disk_read', 'disk_write', 'net_rx', 'net_tx'] as const;

/** A reading reused for this many times as long as it took (see costBounded). */
const REUSE_FACTOR = 20;
/** A reading is never reused for longer than this, whatever it took. */
const MAX_REUSE_MS = 10_000;

/**
 * `read`, reused while fresh: for REUSE_FACTOR times as long as reading
 * takes, so that reading costs at most ~5% of the time whoever asks how
 * often. Readers that come while it is being read share it; a failure is
 * not kept. The queue's depth is a count of its table on SQL databases,
 * which grows with the backlog: at 1,000,000 calls queued, 75 ms on
 * Postgres and 400-520 ms on MariaDB, and it ran at every scrape and every
 * reading of the console (each 2 s while one is open, each 10 s to record
 * its history), on SQLite in the writer thread that every accept waits for.
 * What a reading takes is the shorter of the last two: one that waited
 * behind other work (on SQLite, the writer thread's checkpoint at the end
 * of a drain) is not taken for its cost, and kept a 0 for 11 s while 24,000
 * calls were queued after it; the first reading is not reused. A count of
 * a few ms (a backlog of thousands) is reused for a tenth of a second at
 * most, one of no measurable time not at all, and none for more than
 * MAX_REUSE_MS.
 */
export function costBounded<T>(read: () => Promise<T>, now: () => number = () => performance.now()): () => Promise<T> {
  let kept: { value: Promise<T>; until: number } | undefined;
  /** What the last reading took (none yet: 0, so the first is not reused). */
  let lastCost = 0;
  return () => {
    if (kept && now() < kept.until) return kept.value;
    const started = now();
    const value = read();
    kept = { value, until: Infinity };
    const entry = kept;
    value.then(
      () => {
        const answered = now();
        const cost = answered - started;
        entry.until = answered + Math.min(MAX_REUSE_MS, Math.min(cost, lastCost) * REUSE_FACTOR);
        lastCost = cost;
      },
      () => {
        if (kept === entry) kept = undefined;
      },
    );
    return value;
  };
}

/** One fn's cells, looked up once per fn version. */
interface FnCells {
  readonly calls: Cell;
  readonly queued: Cell;
  readonly running: Cell;
  readonly completed: Cell;
  readonly canceled: Cell;
  readonly timeouts: Cell;
  readonly errors: Cell;
  readonly serverBusy: Cell;
  readonly wait: HistogramCell;
  readonly invoke: Readonly<Record<string, HistogramCell>>;
}

/** One fn's container cells. */
interface ContainerCells {
  readonly count: Readonly<Record<ContainerState, Cell>>;
  readonly time: Readonly<Record<ContainerState, HistogramCell>>;
  readonly coldstarts: Cell;
  readonly init: HistogramCell;
}

export interface MetricsOptions {
  readonly role: string;
  readonly version: string;
  /** The queue of detached calls: its depth and oldest ready call. */
  readonly queue?: Queue;
}

export class Metrics implements CallListener, ContainerListener {
  readonly registry = new Registry();
  private readonly byFn = new WeakMap<CallFn, FnCells>();
  private readonly containersByFn = new Map<string, ContainerCells>();

  private readonly calls = this.counter('fn_calls', 'Calls received', FN);
  private readonly queued = this.gauge('fn_queued', 'Calls waiting for a container', FN);
  private readonly running = this.gauge('fn_running', 'Calls a container is working on', FN);
  private readonly completed = this.counter('fn_completed', 'Calls completed successfully', FN);
  private readonly canceled = this.counter('fn_canceled', 'Calls cancelled (the caller left, or the server stopped them)', FN);
  private readonly timeouts = this.counter('fn_timeouts', 'Calls that ran past their fn timeout', FN);
  private readonly errors = this.counter('fn_errors', 'Calls that failed (not counting timeouts and server busy)', FN);
  private readonly serverBusy = this.counter('fn_server_busy', 'Calls refused because no container or capacity was free in time (503)', FN);
  private readonly evictions = this.counter('fn_container_evictions', 'Idle containers evicted to make room for others', FN);
  private readonly retirements = this.counter('fnts_container_retirements_total', 'Containers that left service, by reason', [...FN, 'reason']);
  private readonly coldstarts = this.counter('faas_coldstarts_total', 'Containers started (each start is a cold start for the calls that wait on it)', FN);
  private readonly prewarms = this.counter('fnts_prewarm_total', 'Containers the keep-alive policy started ahead of demand: used by a call, or wasted (left service unused)', [...FN, 'result']);
  private readonly init = this.histogram('faas_init_duration_seconds', 'Time from a container start to its function being ready', FN, DURATION_BUCKETS);
  private readonly invoke = this.histogram('faas_invoke_duration_seconds', 'Time the function worked on a call', [...FN, 'status'], DURATION_BUCKETS);
  private readonly wait = this.histogram('fnts_call_wait_duration_seconds', 'Time a call waited for a container', FN, DURATION_BUCKETS);
  private readonly containerCount = Object.fromEntries(STATES.map((s) => [s, this.gauge(`fn_container_${s}_total`, `Containers in state ${s}`, FN)])) as Record<ContainerState, CellMetric>;
  private readonly containerTime = Object.fromEntries(
    STATES.map((s) => [s, this.histogram(`fn_container_${s}_duration_seconds`, `Time containers spent in state ${s}, per visit`, FN, DURATION_BUCKETS)]),
  ) as Record<ContainerState, CellHistogram>;
  private readonly dockerStats = Object.fromEntries(DOCKER_STATS.map((k) => [k, this.gauge(`fn_docker_stats_${k}`, `Last docker stats sample of a call of the fn: ${k}`, FN)])) as Record<
    (typeof DOCKER_STATS)[number],
    CellMetric
  >;
  private readonly apiLatency = this.histogram('fn_api_latency', 'API request latency in milliseconds, by route', ['path', 'method', 'status'], API_LATENCY_MS);
  private readonly apiCells = new Map<string, HistogramCell>();
  private readonly mqRetries = this.counter('fnts_mq_retries_total', 'Detached calls put back to run again after a failure of the function', FN);
  private readonly mqDead = this.counter('fnts_mq_dead_letters_total', 'Detached calls dead-lettered after their last attempt', FN);
  // LBs: where calls were placed, and how hard that was.
  private readonly lbAttempts = this.counter(
    'fnts_lb_attempts_total',
    'Attempts to place a call on a runner, by runner and result (committed, refused: the runner had no capacity or was draining, failed: unreachable)',
    ['runner', 'result'],
  );
  private readonly lbPlaced = this.counter('fnts_lb_placed_total', 'Calls placed on each runner', ['runner']);
  private readonly lbRetries = this.counter('fnts_lb_retries_total', 'Attempts that did not place their call, so it was tried again (on another runner, or after a pause)', ['reason']);
  private readonly lbUnplaced = this.counter('fnts_lb_unplaced_total', 'Calls no runner took before their timeout (answered 503)', []);
  private readonly lbPlacement = this.histogram('fnts_lb_placement_duration_seconds', 'Time from a call reaching the LB until a runner committed to it', [], DURATION_BUCKETS);
  // Pure runners: engagements the LBs opened.
  private readonly runnerEngagements = this.counter('fnts_runner_engagements_total', 'Calls LBs sent to this runner, by result (handled, or refused: no capacity, or draining)', ['result']);

  constructor(private readonly o: MetricsOptions) {
    collectDefaultMetrics({ register: this.registry });
    new Gauge({ name: 'fnts_build_info', help: 'The fnts version and role of this server', labelNames: ['version', 'role'], registers: [this.registry] }).set({ version: o.version, role: o.role }, 1);
    if (o.queue) this.watchQueue(o.queue);
  }

  /**
   * The queue of detached calls (roles that keep or share one): its oldest
   * ready call, read at each scrape, and its depth, counted at most as often
   * as costBounded allows (see there).
   */
  watchQueue(queue: Queue): void {
    const size = costBounded(() => queue.size());
    new Gauge({
      name: 'fnts_mq_depth',
      help: 'Detached calls in the queue, ready or running',
      registers: [this.registry],
      async collect() {
        this.set(await size().catch(() => NaN));
      },
    });
    new Gauge({
      name: 'fnts_mq_oldest_age_seconds',
      help: 'How long the oldest ready detached call has been waiting to run (0 when none)',
      registers: [this.registry],
      async collect() {
        const at = await queue.oldestReadyAt().catch(() => NaN);
        this.set(at === undefined ? 0 : Math.max(0, (Date.now() - at) / 1000));
      },
    });
  }

  /** Memory and CPU for containers (roles that run functions): Fn's fn_util_* gauges. */
  watchResources(resources: ResourceTracker): void {
    const view = (pick: (s: ReturnType<ResourceTracker['snapshot']>) => number) =>
      function (this: Gauge) {
        this.set(pick(resources.snapshot()));
      };
    const total = (p: { syncTotal: number; asyncTotal: number }): number => p.syncTotal + p.asyncTotal;
    const used = (p: { syncUsed: number; asyncUsed: number }): number => p.syncUsed + p.asyncUsed;
    const gauge = (name: string, help: string, collect: (this: Gauge) => void): void => void new Gauge({ name, help, registers: [this.registry], collect });
    gauge(
      'fn_util_mem_used',
      'Memory reserved for containers, bytes',
      view((s) => used(s.memory)),
    );
    gauge(
      'fn_util_mem_avail',
      'Memory free for containers, bytes',
      view((s) => total(s.memory) - used(s.memory)),
    );
    gauge(
      'fn_util_cpu_used',
      'CPU reserved for containers, milli-CPUs',
      view((s) => used(s.cpu)),
    );
    gauge(
      'fn_util_cpu_avail',
      'CPU free for containers, milli-CPUs',
      view((s) => total(s.cpu) - used(s.cpu)),
    );
  }

  /** The exposition, in Prometheus' text format. */
  text(): Promise<string> {
    return this.registry.metrics();
  }

  get contentType(): string {
    return this.registry.contentType;
  }

  // ---- calls

  onCallStart(call: Call): void {
    const c = this.cells(call.fn);
    c.calls.value++;
    c.queued.value++;
  }

  onCallExec(call: Call): void {
    const c = this.cells(call.fn);
    c.queued.value--;
    c.running.value++;
  }

  onCallEnd(call: Call, outcome: CallOutcome): void {
    const c = this.cells(call.fn);
    const ran = outcome.startedAt !== undefined;
    if (ran) c.running.value--;
    else c.queued.value--;
    switch (outcome.status) {
      case 'success':
        c.completed.value++;
        break;
      case 'timeout':
        c.timeouts.value++;
        break;
      case 'cancelled':
        c.canceled.value++;
        break;
      default:
        if (outcome.httpStatus === 503) c.serverBusy.value++;
        else c.errors.value++;
    }
    const t = outcome.timings;
    this.wait.observe(c.wait, t.wait_ms / 1000);
    if (ran) this.invoke.observe(c.invoke[outcome.status] ?? c.invoke['error']!, t.exec_ms / 1000);
    const last = outcome.stats.length > 0 ? outcome.stats[outcome.stats.length - 1]!.metrics : undefined;
    if (last) {
      for (const k of DOCKER_STATS) {
        const v = last[k];
        if (v !== undefined) this.dockerStats[k].cell(call.fn.appId, call.fn.fnId).value = v;
      }
    }
  }

  private cells(fn: CallFn): FnCells {
    let c = this.byFn.get(fn);
    if (!c) {
      const l = [fn.appId, fn.fnId] as const;
      c = {
        calls: this.calls.cell(...l),
        queued: this.queued.cell(...l),
        running: this.running.cell(...l),
        completed: this.completed.cell(...l),
        canceled: this.canceled.cell(...l),
        timeouts: this.timeouts.cell(...l),
        errors: this.errors.cell(...l),
        serverBusy: this.serverBusy.cell(...l),
        wait: this.wait.cell(...l),
        invoke: Object.fromEntries(STATUSES.map((s) => [s, this.invoke.cell(...l, s)])),
      };
      this.byFn.set(fn, c);
    }
    return c;
  }

  // ---- containers

  onContainerState(ref: ContainerRef, from: ContainerState | undefined, to: ContainerState | undefined, ms: number): void {
    const c = this.containerCells(ref);
    if (from) {
      c.count[from].value--;
      this.containerTime[from].observe(c.time[from], ms / 1000);
      if (from === 'start' && to !== undefined) {
        // A pre-warm's start is no call's cold start.
        if (to !== 'prewarmed') c.coldstarts.value++;
        this.init.observe(c.init, ms / 1000);
      }
    }
    if (to) c.count[to].value++;
  }

  onContainerRetired(ref: ContainerRef, reason: RetireReason): void {
    this.retirements.cell(ref.appId, ref.fnId, reason).value++;
    if (reason === 'evicted') this.evictions.cell(ref.appId, ref.fnId).value++;
  }

  onPrewarm(ref: ContainerRef, result: PrewarmResult): void {
    this.prewarms.cell(ref.appId, ref.fnId, result).value++;
  }

  private containerCells(ref: ContainerRef): ContainerCells {
    let c = this.containersByFn.get(ref.fnId);
    if (!c) {
      const l = [ref.appId, ref.fnId] as const;
      c = {
        count: Object.fromEntries(STATES.map((s) => [s, this.containerCount[s].cell(...l)])) as Record<ContainerState, Cell>,
        time: Object.fromEntries(STATES.map((s) => [s, this.containerTime[s].cell(...l)])) as Record<ContainerState, HistogramCell>,
        coldstarts: this.coldstarts.cell(...l),
        init: this.init.cell(...l),
      };
      this.containersByFn.set(ref.fnId, c);
    }
    return c;
  }

  // ---- the queue of detached calls

  onRetry(call: Call): void {
    this.mqRetries.cell(call.fn.appId, call.fn.fnId).value++;
  }

  onDead(call: Call): void {
    this.mqDead.cell(call.fn.appId, call.fn.fnId).value++;
  }

  // ---- an LB's placements (PlacementListener)

  onAttempt(_fnId: string, runner: string, result: 'committed' | 'refused' | 'failed'): void {
    this.lbAttempts.cell(runner, result).value++;
    if (result !== 'committed') this.lbRetries.cell(result).value++;
  }

  onPlaced(_fnId: string, runner: string, _attempts: number, placeMs: number): void {
    this.lbPlaced.cell(runner).value++;
    this.lbPlacement.observe(this.lbPlacement.cell(), placeMs / 1000);
  }

  onUnplaced(): void {
    this.lbUnplaced.cell().value++;
  }

  /** Each runner an LB places on: 1 while it is up, 0 while it is held down after failing. */
  watchRunners(runners: () => ReadonlyArray<{ readonly address: string; readonly up: boolean }>): void {
    new Gauge({
      name: 'fnts_lb_runner_up',
      help: 'Whether the LB places calls on the runner (0 while it is held down after it could not be reached)',
      labelNames: ['runner'],
      registers: [this.registry],
      collect() {
        // A managed pool's runners come and go: one that left shows no more.
        this.reset();
        for (const r of runners()) this.set({ runner: r.address }, r.up ? 1 : 0);
      },
    });
  }

  // ---- a pure runner's engagements

  onEngagement(result: 'handled' | 'refused'): void {
    this.runnerEngagements.cell(result).value++;
  }

  // ---- the API

  /** One API request served: `path` is its route template (bounded), never the URL. */
  apiRequest(path: string, method: string, status: number, ms: number): void {
    const key = `${method} ${path} ${status}`;
    let cell = this.apiCells.get(key);
    if (!cell) {
      cell = this.apiLatency.cell(path, method, String(status));
      this.apiCells.set(key, cell);
    }
    this.apiLatency.observe(cell, ms);
  }

  // ---- registration

  private counter(name: string, help: string, labels: readonly string[]): CellMetric {
    return this.register(new CellMetric('counter', name, help, labels));
  }

  private gauge(name: string, help: string, labels: readonly string[]): CellMetric {
    return this.register(new CellMetric('gauge', name, help, labels));
  }

  private histogram(name: string, help: string, labels: readonly string[], bounds: readonly number[]): CellHistogram {
    return this.register(new CellHistogram(name, help, labels, bounds));
  }

  private register<M extends CellMetric | CellHistogram>(m: M): M {
    // prom-client types registerMetric for its own classes; its Registry reads only what series.ts's
    // classes have (name, help, type, aggregator, get()), which its exposition test pins.
    this.registry.registerMetric(m as unknown as Parameters<Registry['registerMetric']>[0]);
    return m;
  }
}
