/**
 * The fleet as the console of an API (or full) node sees it: the nodes
 * FNTS_CONSOLE_FLEET names (LBs, pure runners, pool managers), read from
 * their /metrics, the numbers a Prometheus scraping them sees.
 *
 * Nodes are read on demand and the reading is shared: `report()` reads a
 * node again when its last reading is older than `maxAgeMs` and none is in
 * flight, so however many consoles watch, each node has at most one read in
 * flight and one per `maxAgeMs`, and nothing is read while nobody asks.
 *
 *   never read ──report()──▶ reading ──answer──▶ up (its figures)
 *                               ▲        └─fail──▶ down (the reason in words)
 *                               └── report() after maxAgeMs ──┘
 *
 * What another node sends is untrusted: its answer is bounded in time
 * (`timeoutMs`) and size (`maxBytes`), its text is parsed by a reader that
 * keeps only the series the view shows (exposition.ts), and label values
 * are cut to a length. A figure a node did not report is null, never 0.
 */
import { get as httpGet, type IncomingMessage } from 'node:http';
import { get as httpsGet } from 'node:https';
import { CONTAINER_STATES, STATE_METRIC, type ContainerCounts } from './figures.js';
import { ExpositionReader, type Exposition, type Sample } from './exposition.js';

/** One node of the fleet, as last read. */
export interface FleetNode {
  /** Its base URL, as FNTS_CONSOLE_FLEET names it. */
  readonly url: string;
  /** Whether its last reading answered; null before the first one ended. */
  readonly up: boolean | null;
  /** Why the last reading failed, in words (`not reachable: connect ECONNREFUSED ...`); null when it answered. */
  readonly error: string | null;
  /** When it last answered (ISO 8601); null: never since this node started. */
  readonly answered_at: string | null;
  /** Its role and version (fnts_build_info); null: not reported (not an fnts node, or down). */
  readonly role: string | null;
  readonly version: string | null;
  /** A node that runs calls (pure runner, full): calls running in a container and waiting for one (fn_running, fn_queued). */
  readonly calls_running: number | null;
  readonly calls_waiting: number | null;
  /** Memory reserved for containers, of the total it may reserve (fn_util_mem_used, fn_util_mem_avail). */
  readonly memory: { readonly used_bytes: number; readonly total_bytes: number } | null;
  readonly containers: ContainerCounts | null;
  /** An LB: the runners it places calls on (fnts_lb_runner_up), and how many calls each got from it (fnts_lb_placed_total). */
  readonly runners: readonly FleetRunner[] | null;
  /** A pool manager: its runner groups (fnts_pool_runners, fnts_pool_target_runners) and the LBs advertising to it (fnts_pool_lbs). */
  readonly groups: readonly PoolGroup[] | null;
  readonly lbs: number | null;
}

export interface FleetRunner {
  /** The runner's gRPC address, as the LB dials it. */
  readonly address: string;
  /** false while the LB holds it down after it could not be reached. */
  readonly up: boolean;
  readonly placed: number | null;
}

export interface PoolGroup {
  readonly group: string;
  /** The runners the manager aims for; null: not reported. */
  readonly target: number | null;
  /** The runners it has, by state (starting, active, draining, removing); null: not reported. */
  readonly runners: Readonly<Record<string, number>> | null;
}

/** Figures of a node that runs calls; the others' are null even where their registry declares the series. */
const RUNS_CALLS = new Set(['full', 'pure-runner']);
/** At most this many runners of an LB, groups of a pool manager and states of a group are kept. */
const MAX_ITEMS = 256;
const MAX_STATES = 16;

const WANTED: ReadonlySet<string> = new Set([
  'fnts_build_info',
  'fn_running',
  'fn_queued',
  'fn_util_mem_used',
  'fn_util_mem_avail',
  ...Object.values(STATE_METRIC),
  'fnts_lb_runner_up',
  'fnts_lb_placed_total',
  'fnts_pool_runners',
  'fnts_pool_target_runners',
  'fnts_pool_lbs',
]);

/** The finite sum of a family's samples; null when the node did not report it. */
function total(e: Exposition, name: string, keep: (s: Sample) => boolean = () => true): number | null {
  const samples = e.get(name);
  if (samples === undefined) return null;
  let sum = 0;
  for (const s of samples) if (keep(s) && Number.isFinite(s.value)) sum += s.value;
  return sum;
}

/** The distinct values of a label over a family's samples, in order of appearance, at most MAX_ITEMS. */
function labelValues(samples: readonly Sample[] | undefined, label: string): string[] {
  const seen = new Set<string>();
  for (const s of samples ?? []) {
    const v = s.labels[label];
    if (v !== undefined && seen.size < MAX_ITEMS) seen.add(v);
  }
  return [...seen];
}

function runnersOf(e: Exposition): FleetRunner[] | null {
  const up = e.get('fnts_lb_runner_up');
  if (up === undefined) return null;
  return labelValues(up, 'runner').map((address) => ({
    address,
    up: total(e, 'fnts_lb_runner_up', (s) => s.labels['runner'] === address) === 1,
    placed: total(e, 'fnts_lb_placed_total', (s) => s.labels['runner'] === address),
  }));
}

function groupsOf(e: Exposition): PoolGroup[] | null {
  const runners = e.get('fnts_pool_runners');
  const targets = e.get('fnts_pool_target_runners');
  if (runners === undefined && targets === undefined) return null;
  const names = [...new Set([...labelValues(runners, 'group'), ...labelValues(targets, 'group')])].slice(0, MAX_ITEMS).sort();
  return names.map((group) => {
    let byState: Record<string, number> | null = null;
    if (runners !== undefined) {
      byState = {};
      for (const s of runners) {
        const state = s.labels['state'];
        if (s.labels['group'] !== group || state === undefined || !Number.isFinite(s.value)) continue;
        if (state in byState || Object.keys(byState).length < MAX_STATES) byState[state] = (byState[state] ?? 0) + s.value;
      }
    }
    const target = targets?.find((s) => s.labels['group'] === group && Number.isFinite(s.value))?.value ?? null;
    return { group, target, runners: byState };
  });
}

/** A node's figures from what its /metrics said (the `wanted` families of it). */
export function nodeFigures(e: Exposition): Omit<FleetNode, 'url' | 'up' | 'error' | 'answered_at'> {
  const build = e.get('fnts_build_info')?.[0]?.labels;
  const role = build?.['role'] ?? null;
  // An unknown role (a node that is not fnts: Fn's own runner) shows what it reported.
  const runsCalls = role === null || RUNS_CALLS.has(role);
  const used = total(e, 'fn_util_mem_used');
  const avail = total(e, 'fn_util_mem_avail');
  let containers: ContainerCounts | null = null;
  if (runsCalls && CONTAINER_STATES.some((s) => e.has(STATE_METRIC[s]))) {
    containers = Object.fromEntries(CONTAINER_STATES.map((s) => [s, total(e, STATE_METRIC[s]) ?? 0])) as ContainerCounts;
  }
  return {
    role,
    version: build?.['version'] ?? null,
    calls_running: runsCalls ? total(e, 'fn_running') : null,
    calls_waiting: runsCalls ? total(e, 'fn_queued') : null,
    memory: used !== null && avail !== null ? { used_bytes: used, total_bytes: used + avail } : null,
    containers,
    runners: runnersOf(e),
    groups: groupsOf(e),
    lbs: total(e, 'fnts_pool_lbs'),
  };
}

const UNKNOWN = {
  role: null,
  version: null,
  calls_running: null,
  calls_waiting: null,
  memory: null,
  containers: null,
  runners: null,
  groups: null,
  lbs: null,
} as const;

/** What a reading ended with: the node's text parsed, or why there is none. */
type Outcome = { readonly ok: true; readonly exposition: Exposition } | { readonly ok: false; readonly error: string };

export interface ScrapeOptions {
  readonly timeoutMs: number;
  readonly maxBytes: number;
  /** Aborts every reading in flight (the console closing). */
  readonly signal: AbortSignal;
}

const size = (n: number): string => (n >= 1048576 ? `${Math.round((n / 1048576) * 10) / 10} MiB` : `${Math.round(n / 1024)} KiB`);

/** An error's message; a connection tried on several addresses (localhost: ::1 and 127.0.0.1) fails with each one's, in an AggregateError whose own message is empty. */
function messageOf(err: unknown): string {
  if (err instanceof AggregateError && err.errors.length > 0) return [...new Set(err.errors.map(messageOf))].join('; ');
  if (err instanceof Error) return err.message || ((err as NodeJS.ErrnoException).code ?? err.name);
  return String(err);
}

/** Why a reading failed, in words a person reads in the view; never a stack. */
function failure(err: unknown, o: ScrapeOptions, timeout: AbortSignal): string {
  if (o.signal.aborted) return 'not read: the console is closing';
  if (timeout.aborted) return `no answer within ${o.timeoutMs / 1000} s`;
  return `not reachable: ${messageOf(err).slice(0, 300)}`;
}

/** GET `url` with node:http(s) (not fetch: it refuses some ports, e.g. 6000, and the message would say only "bad port"). */
function get(url: string, signal: AbortSignal): Promise<IncomingMessage> {
  return new Promise((resolve, reject) => {
    const req = (url.startsWith('https:') ? httpsGet : httpGet)(url, { signal, headers: { Accept: 'text/plain' }, agent: false }, resolve);
    // Every error of the request rejects (once settled, a later one is dropped): none reaches the event loop.
    req.on('error', reject);
  });
}

/** Reads `${url}/metrics` within the bounds of `o`. Never rejects. */
export async function scrape(url: string, o: ScrapeOptions): Promise<Outcome> {
  const timeout = AbortSignal.timeout(o.timeoutMs);
  const signal = AbortSignal.any([o.signal, timeout]);
  let res: IncomingMessage | undefined;
  try {
    res = await get(`${url}/metrics`, signal);
    // Its errors reach the loop below, which reads it; this keeps one coming after the loop off the event loop.
    res.on('error', () => undefined);
    // Redirects are not followed: the node answers itself or not at all.
    if (res.statusCode !== 200) return { ok: false, error: `its /metrics answered ${res.statusCode} ${res.statusMessage ?? ''}`.trim() };
    const reader = new ExpositionReader(WANTED);
    const decoder = new TextDecoder();
    let bytes = 0;
    for await (const chunk of res as AsyncIterable<Buffer>) {
      bytes += chunk.byteLength;
      if (bytes > o.maxBytes) return { ok: false, error: `its /metrics is larger than ${size(o.maxBytes)}: not read` };
      reader.write(decoder.decode(chunk, { stream: true }));
    }
    reader.write(decoder.decode());
    return { ok: true, exposition: reader.end() };
  } catch (err) {
    return { ok: false, error: failure(err, o, timeout) };
  } finally {
    // What was not read is not wanted: the connection (never reused: agent false) goes.
    res?.destroy();
  }
}

export interface FleetOptions {
  /** The nodes' base URLs (FNTS_CONSOLE_FLEET). */
  readonly urls: readonly string[];
  /** Default 2000 ms: a node slower than this reads as down. */
  readonly timeoutMs?: number;
  /** Default 8 MiB: a larger /metrics is not read. */
  readonly maxBytes?: number;
  /** Default 1000 ms: a reading younger than this is shared rather than taken again. */
  readonly maxAgeMs?: number;
  readonly now?: () => number;
}

interface Watched {
  node: FleetNode;
  /** When the last reading started (ms since the epoch); -Infinity: never. */
  startedAt: number;
  reading: Promise<void> | undefined;
}

export class Fleet {
  readonly urls: readonly string[];
  private readonly nodes: Watched[];
  private readonly stop = new AbortController();
  private readonly scrapeOptions: ScrapeOptions;
  private readonly maxAgeMs: number;
  private readonly now: () => number;

  constructor(o: FleetOptions) {
    this.urls = o.urls;
    this.maxAgeMs = o.maxAgeMs ?? 1000;
    this.now = o.now ?? Date.now;
    this.scrapeOptions = { timeoutMs: o.timeoutMs ?? 2000, maxBytes: o.maxBytes ?? 8 * 1048576, signal: this.stop.signal };
    this.nodes = o.urls.map((url) => ({ node: { url, up: null, error: null, answered_at: null, ...UNKNOWN }, startedAt: -Infinity, reading: undefined }));
  }

  /** Every node as last read, reading again those whose reading is older than maxAgeMs (and waiting for the readings in flight). Never rejects. */
  async report(): Promise<readonly FleetNode[]> {
    const now = this.now();
    for (const w of this.nodes) {
      if (w.reading === undefined && now - w.startedAt >= this.maxAgeMs && !this.stop.signal.aborted) {
        w.startedAt = now;
        w.reading = this.read(w).finally(() => (w.reading = undefined));
      }
    }
    await Promise.all(this.nodes.flatMap((w) => (w.reading ? [w.reading] : [])));
    return this.nodes.map((w) => w.node);
  }

  /** Aborts the readings in flight; report() reads nothing more. Idempotent. */
  close(): void {
    this.stop.abort();
  }

  private async read(w: Watched): Promise<void> {
    const outcome = await scrape(w.node.url, this.scrapeOptions);
    w.node = outcome.ok
      ? { url: w.node.url, up: true, error: null, answered_at: new Date(this.now()).toISOString(), ...nodeFigures(outcome.exposition) }
      : { url: w.node.url, up: false, error: outcome.error, answered_at: w.node.answered_at, ...UNKNOWN };
  }
}
