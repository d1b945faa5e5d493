/**
 * deploy/: the Grafana dashboard, the Prometheus scrape example and the alert
 * rules an operator installs. Every PromQL expression in them may name only
 * series fnts serves (a typo such as fn_call for fn_calls fails here rather
 * than as an empty panel or an alert that never fires), rate() and
 * increase() take counters, histogram_quantile() takes _bucket series and
 * keeps `le`. Where promtool is installed (.ci/run installs it), Prometheus'
 * own parser reads the config, the rules and every dashboard expression, and
 * the alert rules run against made-up series.
 */
import { spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, describe, expect, it } from 'vitest';
import { parse, stringify } from 'yaml';
import { MemoryCpuTracker } from '../../src/agent/index.js';
import type { Queue } from '../../src/mq/index.js';
import { Metrics } from '../../src/telemetry/index.js';
import { peerPresent } from '../support/peers.js';

type Kind = 'counter' | 'gauge' | 'histogram';

// ---- The metrics fnts serves. This list must match src/telemetry/metrics.ts
// (and prom-client's default metrics it registers): the first test checks it
// against that registry, so a metric renamed there fails here until the
// dashboard and the alerts follow.

/** Series with the labels app_id and fn_id (and the extra ones noted). */
const PER_FN: Record<string, Kind> = {
  fn_calls: 'counter',
  fn_completed: 'counter',
  fn_canceled: 'counter',
  fn_timeouts: 'counter',
  fn_errors: 'counter',
  fn_server_busy: 'counter',
  fn_container_evictions: 'counter',
  fn_queued: 'gauge',
  fn_running: 'gauge',
  fn_container_wait_total: 'gauge',
  fn_container_start_total: 'gauge',
  fn_container_idle_total: 'gauge',
  fn_container_paused_total: 'gauge',
  fn_container_busy_total: 'gauge',
  fn_container_prewarmed_total: 'gauge',
  fn_container_wait_duration_seconds: 'histogram',
  fn_container_start_duration_seconds: 'histogram',
  fn_container_idle_duration_seconds: 'histogram',
  fn_container_paused_duration_seconds: 'histogram',
  fn_container_busy_duration_seconds: 'histogram',
  fn_container_prewarmed_duration_seconds: 'histogram',
  fn_docker_stats_cpu_user: 'gauge',
  fn_docker_stats_cpu_total: 'gauge',
  fn_docker_stats_cpu_kernel: 'gauge',
  fn_docker_stats_mem_limit: 'gauge',
  fn_docker_stats_mem_usage: 'gauge',
  fn_docker_stats_disk_read: 'gauge',
  fn_docker_stats_disk_write: 'gauge',
  fn_docker_stats_net_rx: 'gauge',
  fn_docker_stats_net_tx: 'gauge',
  faas_coldstarts_total: 'counter',
  faas_init_duration_seconds: 'histogram',
  faas_invoke_duration_seconds: 'histogram', // + status: success|error|timeout|cancelled
  fnts_call_wait_duration_seconds: 'histogram',
  fnts_container_retirements_total: 'counter', // + reason
  fnts_prewarm_total: 'counter', // + result: used|wasted
  fnts_mq_retries_total: 'counter',
  fnts_mq_dead_letters_total: 'counter',
};

/** Series of the node as a whole (no app_id, fn_id). */
const PER_NODE: Record<string, Kind> = {
  fn_util_mem_used: 'gauge',
  fn_util_mem_avail: 'gauge',
  fn_util_cpu_used: 'gauge',
  fn_util_cpu_avail: 'gauge',
  fn_api_latency: 'histogram', // path, method, status; milliseconds
  fnts_mq_depth: 'gauge',
  fnts_mq_oldest_age_seconds: 'gauge',
  fnts_build_info: 'gauge', // version, role
};

/** Series of fleet roles: LBs (runner: host:port from FN_RUNNER_ADDRESSES) and pure runners. */
const FLEET: Record<string, Kind> = {
  fnts_lb_attempts_total: 'counter', // runner, result: committed|refused|failed
  fnts_lb_retries_total: 'counter', // reason: refused|failed
  fnts_lb_placed_total: 'counter', // runner
  fnts_lb_unplaced_total: 'counter',
  fnts_lb_placement_duration_seconds: 'histogram',
  fnts_lb_runner_up: 'gauge', // runner
  fnts_runner_engagements_total: 'counter', // result: handled|refused
};

/** prom-client's default metrics (collectDefaultMetrics). */
const PROCESS: Record<string, Kind> = {
  process_cpu_user_seconds_total: 'counter',
  process_cpu_system_seconds_total: 'counter',
  process_cpu_seconds_total: 'counter',
  process_start_time_seconds: 'gauge',
  process_resident_memory_bytes: 'gauge',
  process_virtual_memory_bytes: 'gauge',
  process_heap_bytes: 'gauge',
  process_open_fds: 'gauge',
  process_max_fds: 'gauge',
  nodejs_eventloop_lag_seconds: 'gauge',
  nodejs_eventloop_lag_min_seconds: 'gauge',
  nodejs_eventloop_lag_max_seconds: 'gauge',
  nodejs_eventloop_lag_mean_seconds: 'gauge',
  nodejs_eventloop_lag_stddev_seconds: 'gauge',
  nodejs_eventloop_lag_p50_seconds: 'gauge',
  nodejs_eventloop_lag_p90_seconds: 'gauge',
  nodejs_eventloop_lag_p99_seconds: 'gauge',
  nodejs_active_resources: 'gauge',
  nodejs_active_resources_total: 'gauge',
  nodejs_active_handles: 'gauge',
  nodejs_active_handles_total: 'gauge',
  nodejs_active_requests: 'gauge',
  nodejs_active_requests_total: 'gauge',
  nodejs_heap_size_total_bytes: 'gauge',
  nodejs_heap_size_used_bytes: 'gauge',
  nodejs_external_memory_bytes: 'gauge',
  nodejs_heap_space_size_total_bytes: 'gauge',
  nodejs_heap_space_size_used_bytes: 'gauge',
  nodejs_heap_space_size_available_bytes: 'gauge',
  nodejs_version_info: 'gauge',
  nodejs_gc_duration_seconds: 'histogram',
};

/** Series Prometheus itself records for every target it scrapes. */
const SCRAPE: Record<string, Kind> = { up: 'gauge' };

const SERVED: Record<string, Kind> = { ...PER_FN, ...PER_NODE, ...FLEET, ...PROCESS };

/** Each series name a query may use, with its metric and kind: a histogram is only its _bucket, _sum and _count. */
const SERIES = new Map<string, { metric: string; kind: Kind; part?: 'bucket' | 'sum' | 'count' }>();
for (const [metric, kind] of Object.entries({ ...SERVED, ...SCRAPE })) {
  if (kind !== 'histogram') SERIES.set(metric, { metric, kind });
  else for (const part of ['bucket', 'sum', 'count'] as const) SERIES.set(`${metric}_${part}`, { metric, kind, part });
}

// ---- A small PromQL reader: enough to find every series name, function and
// label list in an expression. It does not validate syntax (promtool does).

const AGGREGATIONS = new Set(['sum', 'min', 'max', 'avg', 'group', 'stddev', 'stdvar', 'count', 'count_values', 'bottomk', 'topk', 'quantile', 'limitk', 'limit_ratio']);
const FUNCTIONS = new Set([
  'abs',
  'absent',
  'absent_over_time',
  'ceil',
  'changes',
  'clamp',
  'clamp_max',
  'clamp_min',
  'day_of_month',
  'day_of_week',
  'day_of_year',
  'days_in_month',
  'delta',
  'deriv',
  'exp',
  'floor',
  'histogram_quantile',
  'holt_winters',
  'hour',
  'idelta',
  'increase',
  'irate',
  'label_join',
  'label_replace',
  'ln',
  'log2',
  'log10',
  'minute',
  'month',
  'predict_linear',
  'rate',
  'resets',
  'round',
  'scalar',
  'sgn',
  'sort',
  'sort_desc',
  'sqrt',
  'time',
  'timestamp',
  'vector',
  'year',
  'avg_over_time',
  'min_over_time',
  'max_over_time',
  'sum_over_time',
  'count_over_time',
  'quantile_over_time',
  'stddev_over_time',
  'stdvar_over_time',
  'last_over_time',
  'present_over_time',
]);
/** Keywords followed by a parenthesized list of label names. */
const LABEL_LISTS = new Set(['by', 'without', 'on', 'ignoring', 'group_left', 'group_right']);
const KEYWORDS = new Set(['and', 'or', 'unless', 'bool', 'offset', 'atan2', 'inf', 'nan']);
/** Functions whose range argument must be a counter (or a histogram's parts, which are counters). */
const COUNTER_RANGE = new Set(['rate', 'irate', 'increase', 'resets']);
/** Functions meant for gauges: on a counter they see its resets as drops. */
const GAUGE_RANGE = new Set(['deriv', 'delta', 'idelta', 'predict_linear']);

type Token = { t: 'ident'; v: string; selector?: string } | { t: 'punct'; v: string } | { t: 'selector'; v: string };

function lex(expr: string): Token[] {
  const out: Token[] = [];
  let i = 0;
  const skipQuoted = (from: number): number => {
    const q = expr[from]!;
    let j = from + 1;
    while (j < expr.length && expr[j] !== q) j += expr[j] === '\\' && q !== '`' ? 2 : 1;
    return j + 1;
  };
  while (i < expr.length) {
    const c = expr[i]!;
    const rest = expr.slice(i);
    if (/\s/.test(c)) i++;
    else if (c === '#') i = expr.includes('\n', i) ? expr.indexOf('\n', i) : expr.length;
    else if (c === '"' || c === "'" || c === '`') i = skipQuoted(i);
    else if (c === '{') {
      // Label matchers; quoted values may hold braces.
      let j = i + 1;
      while (j < expr.length && expr[j] !== '}') j = expr[j] === '"' || expr[j] === "'" || expr[j] === '`' ? skipQuoted(j) : j + 1;
      const body = expr.slice(i + 1, j);
      const prev = out.at(-1);
      if (prev?.t === 'ident') prev.selector = body;
      else out.push({ t: 'selector', v: body });
      i = j + 1;
    } else if (c === '[')
      i = expr.indexOf(']', i) + 1 || expr.length; // a range or subquery: durations only
    else if (/[A-Za-z_:]/.test(c)) {
      const v = /^[A-Za-z_:][A-Za-z0-9_:]*/.exec(rest)![0];
      out.push({ t: 'ident', v });
      i += v.length;
    } else if (/[0-9.]/.test(c)) {
      // Numbers and durations (offset 10m): 0.99, 1e9, 0x1f, 1h30m.
      i += /^(?:0x[0-9a-fA-F]+|(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?[A-Za-z0-9]*)/.exec(rest)?.[0].length || 1;
    } else {
      out.push({ t: 'punct', v: c });
      i++;
    }
  }
  return out;
}

interface Analysis {
  /** Series names used, in order. */
  readonly series: string[];
  /** Label matchers of each series selector, as written. */
  readonly selectors: Array<{ series: string; matchers: string }>;
  readonly problems: string[];
}

/** The index of the ')' that closes the '(' at `open`. */
function closing(tokens: Token[], open: number): number {
  let depth = 0;
  for (let k = open; k < tokens.length; k++) {
    const tk = tokens[k]!;
    if (tk.t !== 'punct') continue;
    if (tk.v === '(') depth++;
    else if (tk.v === ')' && --depth === 0) return k;
  }
  return tokens.length;
}

function analyze(expr: string): Analysis {
  const tokens = lex(expr);
  const series: string[] = [];
  const selectors: Analysis['selectors'] = [];
  const problems: string[] = [];
  const isOpen = (k: number): boolean => tokens[k]?.t === 'punct' && tokens[k]!.v === '(';
  /** Label names of every by/without/... list between two token indexes. */
  const labelLists = (from: number, to: number): string[][] => {
    const lists: string[][] = [];
    for (let k = from; k < to; k++) {
      const tk = tokens[k]!;
      if (tk.t === 'ident' && LABEL_LISTS.has(tk.v) && isOpen(k + 1)) {
        const end = closing(tokens, k + 1);
        lists.push(tokens.slice(k + 2, end).flatMap((x) => (x.t === 'ident' ? [x.v] : [])));
      }
    }
    return lists;
  };

  for (let k = 0; k < tokens.length; k++) {
    const tk = tokens[k]!;
    if (tk.t === 'selector') {
      problems.push(`a selector without a metric name: {${tk.v}}`);
      continue;
    }
    if (tk.t !== 'ident') continue;
    if (LABEL_LISTS.has(tk.v) && isOpen(k + 1)) {
      k = closing(tokens, k + 1); // label names, not series
      continue;
    }
    if (KEYWORDS.has(tk.v) || AGGREGATIONS.has(tk.v)) continue;
    if (isOpen(k + 1)) {
      if (!FUNCTIONS.has(tk.v)) {
        problems.push(`unknown function ${tk.v}()`);
        continue;
      }
      const end = closing(tokens, k + 1);
      const first = tokens[k + 2];
      const arg = first?.t === 'ident' ? SERIES.get(first.v) : undefined;
      if (COUNTER_RANGE.has(tk.v) && arg && arg.kind !== 'counter' && !arg.part) problems.push(`${tk.v}() of ${arg.metric}, a ${arg.kind}: it takes a counter`);
      if (GAUGE_RANGE.has(tk.v) && arg && (arg.kind === 'counter' || arg.part)) problems.push(`${tk.v}() of the counter ${first!.v}: use rate() or increase()`);
      if (tk.v === 'histogram_quantile') {
        const inside = tokens.slice(k + 2, end).flatMap((x) => (x.t === 'ident' && SERIES.has(x.v) ? [x.v] : []));
        if (inside.length === 0) problems.push('histogram_quantile() over no histogram');
        for (const s of inside) {
          if (SERIES.get(s)!.part !== 'bucket') problems.push(`histogram_quantile() over ${s}: it takes a histogram's _bucket series`);
        }
        for (const list of labelLists(k + 2, end)) {
          if (!list.includes('le')) problems.push(`histogram_quantile() aggregates by (${list.join(', ')}) without le`);
        }
      }
      continue;
    }
    // Any other identifier is a series name.
    series.push(tk.v);
    if (!SERIES.has(tk.v)) {
      const base = tk.v.replace(/_(bucket|sum|count)$/, '');
      problems.push(
        SERVED[tk.v] === 'histogram' ? `${tk.v} is a histogram: use ${tk.v}_bucket, _sum or _count` : `unknown series ${tk.v}${base !== tk.v && SERVED[base] ? ` (${base} is a ${SERVED[base]})` : ''}`,
      );
    }
    if (tk.selector !== undefined) selectors.push({ series: tk.v, matchers: tk.selector });
  }
  return { series, selectors, problems };
}

// ---- The files

const ROOT = resolve(dirname(fileURLToPath(import.meta.url)), '..', '..');
const DEPLOY = join(ROOT, 'deploy');
const DASHBOARD_PATH = join(DEPLOY, 'grafana', 'fnts-dashboard.json');
const PROMETHEUS_PATH = join(DEPLOY, 'prometheus', 'prometheus.yml');
const ALERTS_PATH = join(DEPLOY, 'prometheus', 'alerts.yml');

interface Target {
  expr: string;
  refId: string;
  legendFormat?: string;
  datasource?: { type: string; uid: string };
}
interface Panel {
  id: number;
  type: string;
  title: string;
  datasource?: { type: string; uid: string };
  gridPos: { h: number; w: number; x: number; y: number };
  targets?: Target[];
  panels?: Panel[];
  collapsed?: boolean;
}
interface Variable {
  name: string;
  type: string;
  query?: string | { query: string };
  definition?: string;
  datasource?: { type: string; uid: string };
}
interface Dashboard {
  schemaVersion: number;
  uid: string;
  panels: Panel[];
  templating: { list: Variable[] };
}
interface Rule {
  alert?: string;
  record?: string;
  expr: string;
  for?: string;
  labels?: Record<string, string>;
  annotations?: Record<string, string>;
}
interface RuleFile {
  groups: Array<{ name: string; rules: Rule[] }>;
}
interface ScrapeConfig {
  job_name: string;
  metrics_path?: string;
  static_configs: Array<{ targets: string[]; labels?: Record<string, string> }>;
}

const dashboard = JSON.parse(readFileSync(DASHBOARD_PATH, 'utf8')) as Dashboard;
const prometheus = parse(readFileSync(PROMETHEUS_PATH, 'utf8')) as { rule_files: string[]; scrape_configs: ScrapeConfig[] };
const alerts = parse(readFileSync(ALERTS_PATH, 'utf8')) as RuleFile;

/** Every panel, rows' nested (collapsed) panels included. */
const allPanels = (list: Panel[]): Panel[] => list.flatMap((p) => [p, ...allPanels(p.panels ?? [])]);
const panels = allPanels(dashboard.panels);
const queries = panels.flatMap((p) => (p.targets ?? []).map((t) => ({ where: `panel "${p.title}" ${t.refId}`, expr: t.expr })));
const variableQuery = (v: Variable): string => (typeof v.query === 'string' ? v.query : (v.query?.query ?? v.definition ?? ''));
/** Grafana's label_values(selector, label): the selector is PromQL, the label is not a series. */
const variableSelector = (q: string): string => /^label_values\((.*),\s*[A-Za-z_][A-Za-z0-9_]*\s*\)$/s.exec(q.trim())?.[1] ?? q;
/** The PromQL of the dashboard's query variables. */
const variableQueries = dashboard.templating.list.filter((v) => v.type === 'query').map((v) => ({ where: `variable ${v.name}`, expr: variableSelector(variableQuery(v)) }));
const rules = alerts.groups.flatMap((g) => g.rules);

const problemsOf = (list: Array<{ where: string; expr: string }>): string[] => list.flatMap(({ where, expr }) => analyze(expr).problems.map((p) => `${where}: ${p}`));

describe('the known metrics', () => {
  it('are what src/telemetry/metrics.ts registers', async () => {
    const queue = { size: async () => 0, oldestReadyAt: async () => undefined } as unknown as Queue;
    const metrics = new Metrics({ role: 'full', version: 'test', queue });
    metrics.watchResources(new MemoryCpuTracker({ memoryBytes: 1024 ** 3, cpuMillis: 1000 }));
    metrics.watchRunners(() => []);
    const registered = Object.fromEntries((await metrics.registry.getMetricsAsJSON()).map((m) => [m.name, String(m.type)]));
    expect(registered).toEqual(SERVED);
  });
});

describe('the PromQL reader', () => {
  const problems = (expr: string): string[] => analyze(expr).problems;

  it('accepts known series, in selectors, ranges and bare', () => {
    expect(problems('sum by (app_id) (rate(fn_calls{app_id=~"$app_id", fn_id!="}"}[5m])) / sum(fn_running)')).toEqual([]);
    expect(analyze('max by (job) (fnts_mq_depth) > 3 and on (job) up offset 10m').series).toEqual(['fnts_mq_depth', 'up']);
  });

  it('fails a misspelt series, in a selector or bare', () => {
    expect(problems('sum(rate(fn_call{app_id=~"$app_id"}[5m]))')).toEqual(['unknown series fn_call']);
    expect(problems('sum(fn_queud)')).toEqual(['unknown series fn_queud']);
    expect(problems('fn_calls_total')).toEqual(['unknown series fn_calls_total']);
  });

  it('fails a histogram named without its _bucket, _sum or _count', () => {
    expect(problems('faas_invoke_duration_seconds{status="error"}')).toEqual([expect.stringContaining('is a histogram')]);
  });

  it('fails rate() of a gauge, deriv() of a counter, and unknown functions', () => {
    expect(problems('rate(fn_running[5m])')).toEqual([expect.stringContaining('a gauge: it takes a counter')]);
    expect(problems('deriv(fn_calls[5m])')).toEqual([expect.stringContaining('use rate()')]);
    expect(problems('histogram_quantil(0.9, fn_calls)')).toEqual(['unknown function histogram_quantil()']);
  });

  it('fails histogram_quantile() over anything but _bucket series, or without le', () => {
    expect(problems('histogram_quantile(0.99, sum by (le) (rate(faas_init_duration_seconds_bucket[5m])))')).toEqual([]);
    expect(problems('histogram_quantile(0.99, sum by (le) (rate(faas_init_duration_seconds_sum[5m])))')).toEqual([expect.stringContaining("takes a histogram's _bucket")]);
    expect(problems('histogram_quantile(0.99, sum by (fn_id) (rate(faas_init_duration_seconds_bucket[5m])))')).toEqual(['histogram_quantile() aggregates by (fn_id) without le']);
  });
});

describe('deploy/grafana/fnts-dashboard.json', () => {
  const DS = '${DS_PROMETHEUS}';

  it('imports anywhere: a DS_PROMETHEUS datasource variable that every panel and query uses', () => {
    expect(dashboard.schemaVersion).toBeGreaterThanOrEqual(38); // Grafana 10.0 and later
    const ds = dashboard.templating.list.find((v) => v.name === 'DS_PROMETHEUS');
    expect(ds).toMatchObject({ type: 'datasource', query: 'prometheus' });
    for (const p of panels.filter((x) => x.type !== 'row')) {
      expect(p.datasource, p.title).toEqual({ type: 'prometheus', uid: DS });
      for (const t of p.targets ?? []) expect(t.datasource ?? p.datasource, `${p.title} ${t.refId}`).toEqual({ type: 'prometheus', uid: DS });
    }
    for (const v of dashboard.templating.list.filter((x) => x.type === 'query')) expect(v.datasource, v.name).toEqual({ type: 'prometheus', uid: DS });
    // No datasource uid of some other Grafana leaks in.
    expect(
      JSON.stringify(dashboard)
        .match(/"uid":\s*"[^"]*"/g)
        ?.filter((u) => !u.includes(DS) && !u.includes('-- Grafana --') && !u.includes('"fnts"')),
    ).toEqual([]);
  });

  it('has app_id and fn_id variables from label_values of known series', () => {
    const vars = Object.fromEntries(dashboard.templating.list.map((v) => [v.name, v]));
    for (const name of ['app_id', 'fn_id']) {
      expect(vars[name]?.type, name).toBe('query');
      expect(variableQuery(vars[name]!), name).toMatch(new RegExp(`^label_values\\(.*,\\s*${name}\\s*\\)$`));
    }
    expect(problemsOf(variableQueries)).toEqual([]);
  });

  it('has the rows Overview, Containers, Resources, Queue, API, Process and Fleet, with panels under each', () => {
    const rows = dashboard.panels.filter((p) => p.type === 'row');
    expect(rows.map((r) => r.title)).toEqual(['Overview', 'Containers', 'Resources', 'Queue', 'API', 'Process', 'Fleet']);
    // Each row has panels, whether below it (expanded) or inside it (collapsed).
    const top = dashboard.panels;
    for (const r of rows) {
      const next = top.indexOf(r) + 1;
      const below = top[next] !== undefined && top[next]!.type !== 'row';
      expect(below || (r.panels ?? []).length > 0, r.title).toBe(true);
    }
  });

  it('lays panels out on the 24-column grid without overlaps, with unique ids', () => {
    const ids = panels.map((p) => p.id);
    expect(new Set(ids).size).toBe(ids.length);
    const placed = dashboard.panels; // nested panels of collapsed rows are laid out when expanded
    for (const p of placed) expect(p.gridPos.x + p.gridPos.w, p.title).toBeLessThanOrEqual(24);
    for (let a = 0; a < placed.length; a++) {
      for (let b = a + 1; b < placed.length; b++) {
        const [p, q] = [placed[a]!.gridPos, placed[b]!.gridPos];
        const overlap = p.x < q.x + q.w && q.x < p.x + p.w && p.y < q.y + q.h && q.y < p.y + p.h;
        expect(overlap, `${placed[a]!.title} / ${placed[b]!.title}`).toBe(false);
      }
    }
  });

  it('queries only series fnts serves, rate() over counters, histogram_quantile() over _bucket series', () => {
    expect(queries.length).toBeGreaterThan(30);
    expect(problemsOf(queries)).toEqual([]);
    const quantiles = queries.filter((q) => q.expr.includes('histogram_quantile'));
    expect(quantiles.length).toBeGreaterThan(5);
    for (const q of quantiles) expect(q.expr, q.where).toMatch(/histogram_quantile\([0-9.]+, sum by \(le(, [a-z_, ]+)?\) \(rate\([a-z_]+_bucket\{[^}]*\}\[5m\]\)\)\)/);
  });

  it('filters every query by the job and instance variables, and per-fn series by app_id and fn_id', () => {
    const missing: string[] = [];
    for (const q of queries) {
      const { series, selectors } = analyze(q.expr);
      if (selectors.length !== series.length) missing.push(`${q.where}: a series without label matchers`);
      for (const s of selectors) {
        const metric = SERIES.get(s.series)?.metric ?? s.series;
        const wanted = ['job=~"$job"', 'instance=~"$instance"', ...(PER_FN[metric] ? ['app_id=~"$app_id"', 'fn_id=~"$fn_id"'] : [])];
        for (const w of wanted) if (!s.matchers.includes(w)) missing.push(`${q.where}: ${s.series} lacks ${w}`);
      }
    }
    expect(missing).toEqual([]);
  });

  it('shows every metric fnts adds to the process defaults', () => {
    const used = new Set([...queries, ...variableQueries].flatMap((q) => analyze(q.expr).series.map((s) => SERIES.get(s)?.metric)));
    const unused = Object.keys({ ...PER_FN, ...PER_NODE }).filter((m) => !used.has(m));
    expect(unused).toEqual([]);
  });
});

describe('deploy/prometheus', () => {
  it('prometheus.yml scrapes /metrics on one node and on a fleet of api, lb and runner nodes, and loads alerts.yml', () => {
    expect(prometheus.rule_files).toEqual(['alerts.yml']);
    const jobs = Object.fromEntries(prometheus.scrape_configs.map((c) => [c.job_name, c]));
    expect(Object.keys(jobs)).toEqual(['fnts', 'fnts-fleet']);
    for (const c of prometheus.scrape_configs) {
      expect(c.metrics_path ?? '/metrics', c.job_name).toBe('/metrics');
      // FntsTargetDown watches up{job=~"fnts.*"}.
      expect(c.job_name).toMatch(/^fnts/);
      for (const sc of c.static_configs) {
        for (const t of sc.targets) expect(t).toMatch(/^[A-Za-z0-9.-]+:\d+$/);
        // A target label `role` would rename fnts_build_info's own to exported_role.
        expect(Object.keys(sc.labels ?? {})).not.toContain('role');
      }
    }
    expect(jobs['fnts']!.static_configs.flatMap((s) => s.targets)).toEqual(['localhost:8080']);
    expect(jobs['fnts-fleet']!.static_configs.map((s) => s.labels?.['fleet_role'])).toEqual(['api', 'lb', 'runner']);
  });

  it('alerts.yml has the alerts, each with a severity and a summary, over known series', () => {
    expect(rules.map((r) => r.alert)).toEqual(['FntsTargetDown', 'FntsHighErrorRatio', 'FntsServerBusy', 'FntsQueueOldestAgeGrowing', 'FntsDeadLetters']);
    for (const r of rules) {
      expect(['warning', 'critical'], r.alert).toContain(r.labels?.['severity']);
      expect(r.annotations?.['summary'], r.alert).toBeTruthy();
      if (r.for !== undefined) expect(r.for, r.alert).toMatch(/^(\d+[smhdwy])+$/);
    }
    expect(problemsOf(rules.map((r) => ({ where: `alert ${r.alert}`, expr: r.expr })))).toEqual([]);
  });
});

// ---- Prometheus' own parser, and the alert rules run against made-up series.

const promtool = peerPresent(spawnSync('promtool', ['--version']).status === 0, 'promtool', "promtool is not on PATH (.ci/run installs Debian's prometheus package for it)");
const title = promtool ? 'promtool' : "promtool (skipped: not on PATH; .ci/run installs Debian's prometheus package for it)";

describe.skipIf(!promtool)(title, () => {
  const dir = mkdtempSync(join(tmpdir(), 'fnts-deploy-'));
  afterAll(() => rmSync(dir, { recursive: true, force: true }));

  const run = (...args: string[]): string => {
    const r = spawnSync('promtool', args, { encoding: 'utf8', cwd: dir });
    const output = `${r.stdout}${r.stderr}`;
    expect(r.status, output).toBe(0);
    return output;
  };

  it('accepts prometheus.yml and alerts.yml', () => {
    run('check', 'config', PROMETHEUS_PATH);
    run('check', 'rules', ALERTS_PATH);
  });

  it('parses every dashboard query', () => {
    // Grafana's variables sit in label matchers; any regex stands in for them.
    const record = [...queries, ...variableQueries].map((q, i) => ({ record: `dashboard:query_${i}`, expr: q.expr.replace(/\$\{?\w+\}?/g, '.*') }));
    writeFileSync(join(dir, 'dashboard.rules.yml'), stringify({ groups: [{ name: 'dashboard', rules: record }] }));
    expect(run('check', 'rules', 'dashboard.rules.yml')).toContain(`SUCCESS: ${record.length} rules found`);
  });

  it('fires the alerts when they should and only then', () => {
    // The rules without their annotations: the test is about when they fire.
    const bare: RuleFile = { groups: alerts.groups.map((g) => ({ ...g, rules: g.rules.map(({ annotations: _, ...r }) => r) })) };
    writeFileSync(join(dir, 'alerts.yml'), stringify(bare));
    const fn = (id: string): string => `app_id="app", fn_id="${id}"`;
    const firing = (alertname: string, labels: Record<string, string>) => ({ alertname, labels });
    const cases = [
      {
        name: 'a target down for 2 minutes',
        input_series: [
          { series: 'up{job="fnts", instance="a:8080"}', values: '0x10' },
          { series: 'up{job="fnts", instance="b:8080"}', values: '1 0 1x8' },
        ],
        expect: [
          { at: '1m', alerts: [] },
          { at: '3m', alerts: [firing('FntsTargetDown', { severity: 'critical', job: 'fnts', instance: 'a:8080' })] },
        ],
      },
      {
        name: 'a fn failing 10% of 1 call/s; not one failing 1%, nor one with a call now and then',
        input_series: [
          { series: `fn_calls{${fn('bad')}}`, values: '0+60x30' },
          { series: `fn_errors{${fn('bad')}}`, values: '0+4x30' },
          { series: `fn_timeouts{${fn('bad')}}`, values: '0+2x30' },
          { series: `fn_calls{${fn('fine')}}`, values: '0+60x30' },
          { series: `fn_errors{${fn('fine')}}`, values: '0+0.6x30' },
          { series: `fn_timeouts{${fn('fine')}}`, values: '0x30' },
          { series: `fn_calls{${fn('quiet')}}`, values: '0+2x30' },
          { series: `fn_errors{${fn('quiet')}}`, values: '0+1x30' },
          { series: `fn_timeouts{${fn('quiet')}}`, values: '0x30' },
        ],
        expect: [
          { at: '5m', alerts: [] },
          { at: '20m', alerts: [firing('FntsHighErrorRatio', { severity: 'warning', app_id: 'app', fn_id: 'bad' })] },
        ],
      },
      {
        name: 'a node answering 503 for 10 minutes',
        input_series: [
          { series: `fn_server_busy{instance="a:8080", ${fn('f')}}`, values: '0+3x30' },
          { series: `fn_server_busy{instance="b:8080", ${fn('f')}}`, values: '0x30' },
        ],
        expect: [
          { at: '5m', alerts: [] },
          { at: '20m', alerts: [firing('FntsServerBusy', { severity: 'warning', instance: 'a:8080' })] },
        ],
      },
      {
        name: 'a queue whose oldest call keeps ageing: one alert for the job, however many nodes report it',
        input_series: [
          { series: 'fnts_mq_oldest_age_seconds{job="fnts", instance="a:8080"}', values: '0+60x30' },
          { series: 'fnts_mq_oldest_age_seconds{job="fnts", instance="b:8080"}', values: '0+60x30' },
          // Old but not growing: calls leave as fast as they come.
          { series: 'fnts_mq_oldest_age_seconds{job="other", instance="c:8080"}', values: '1000x30' },
        ],
        expect: [
          { at: '8m', alerts: [] },
          { at: '20m', alerts: [firing('FntsQueueOldestAgeGrowing', { severity: 'warning', job: 'fnts' })] },
        ],
      },
      {
        name: 'dead letters: a first one (a new series), another one; not old ones, nor those of a target just added',
        input_series: [
          { series: 'up{job="fnts", instance="a:8080"}', values: '1x30' },
          { series: `fnts_mq_dead_letters_total{job="fnts", instance="a:8080", ${fn('first')}}`, values: '_x10 1x20' },
          { series: `fnts_mq_dead_letters_total{job="fnts", instance="a:8080", ${fn('again')}}`, values: '1x10 2x20' },
          { series: `fnts_mq_dead_letters_total{job="fnts", instance="a:8080", ${fn('old')}}`, values: '2x30' },
          // Scraped from 8m on, with dead letters from before.
          { series: 'up{job="fnts", instance="b:8080"}', values: '_x8 1x22' },
          { series: `fnts_mq_dead_letters_total{job="fnts", instance="b:8080", ${fn('older')}}`, values: '_x8 5x22' },
        ],
        expect: [
          { at: '5m', alerts: [] },
          {
            at: '12m',
            alerts: [firing('FntsDeadLetters', { severity: 'warning', app_id: 'app', fn_id: 'again' }), firing('FntsDeadLetters', { severity: 'warning', app_id: 'app', fn_id: 'first' })],
          },
          { at: '25m', alerts: [] },
        ],
      },
    ];
    const alertnames = (c: (typeof cases)[number]): string[] => [...new Set(c.expect.flatMap((e) => e.alerts.map((a) => a.alertname)))];
    // Each case checks, at each time, every alert it is about: a missing or an extra alert fails.
    const tests = cases.map((c) => ({
      name: c.name,
      interval: '1m',
      input_series: c.input_series,
      alert_rule_test: c.expect.flatMap((e) =>
        alertnames(c).map((alertname) => ({
          eval_time: e.at,
          alertname,
          exp_alerts: e.alerts.filter((a) => a.alertname === alertname).map((a) => ({ exp_labels: a.labels })),
        })),
      ),
    }));
    writeFileSync(join(dir, 'alerts.test.yml'), stringify({ rule_files: ['alerts.yml'], evaluation_interval: '1m', tests }));
    run('test', 'rules', 'alerts.test.yml');
  });
});
