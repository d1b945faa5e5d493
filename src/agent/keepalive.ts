/**
 * Keep-alive policies: how long a fn's idle container stays, and when to
 * have one ready for it again (pre-warm). One interface, two policies:
 *
 * - `fixed`: Fn's rule. An idle container stays for the fn's idle_timeout,
 *   then goes; nothing is pre-warmed.
 * - `histogram`: the per-function idle-time histogram of "Serverless in the
 *   Wild" (Shahrad et al., USENIX ATC 2020). Each idle time (the gap
 *   between the end of a fn's last call and the start of its next, while
 *   none of its calls runs) lands in one of 1440 bins (10 s each by
 *   default: 4 hours; the paper's were a minute, too coarse to pre-warm
 *   before a call that comes 45 s after the last). After a call:
 *
 *       call ends                 head × 0.9              tail × 1.1
 *   ───────┼──── released (no memory) ────┼── pre-warmed, idle ──┼── gone
 *
 *   where head and tail are the histogram's 5th and 99th percentiles (a
 *   bin's lower and upper edge). A head in the first bin means "the next
 *   call may come at once": the container is kept from the call's end to
 *   the tail instead. The fn's idle_timeout stays a hard upper bound on how
 *   long any one container idles (Fn's meaning).
 *
 *   When the fn's idle_timeout cuts the stay after a pre-warm so short
 *   that it holds less than half of the idle times, the pre-warm is not
 *   worth its start: the fixed rule again.
 *
 *   Fallbacks: a histogram with few samples, or whose counts, read a
 *   minute at a time as in the paper (CV_GROUP bins), vary little
 *   (coefficient of variation below 2: no clear rhythm), gives the
 *   fixed rule; a fn whose idle times mostly exceed the histogram's range
 *   gets a forecast instead: the mean of its last few such idle times,
 *   pre-warmed at 85% of it and kept to 115%.
 *
 * Memory is bounded: each fn's histogram holds only its bins with counts
 * (at most MAX_BINS; a fn with a rhythm has a handful), old counts are
 * halved once a fn has many (so a drifting rhythm is followed), and the
 * policy remembers at most MAX_FNS fns (the least recently called go).
 * Decisions are a few array reads (the windows are worked out when an idle
 * time is recorded, not per decision); the simulator measures them.
 */

/** What to do with a fn's container that has just become idle. */
export interface KeepAliveDecision {
  /** How long (ms from now) the idle container stays; 0: it goes at once. At most the fn's idle_timeout. */
  readonly keepMs: number;
  /** When (ms from now) to have a container ready again, once this one is gone; undefined: no pre-warm. */
  readonly prewarmInMs: number | undefined;
  /** How long (ms) a pre-warmed container stays idle once ready; at most the fn's idle_timeout. */
  readonly prewarmKeepMs: number;
  /** What the decision rests on, for logs and metrics. */
  readonly basis: 'fixed' | 'histogram' | 'forecast';
}

/**
 * What the agent asks of a keep-alive policy. Calls are reported in time
 * order per fn (`now` from the agent's clock); every method is synchronous,
 * cheap (well under a millisecond) and never throws on any input.
 */
export interface KeepAlivePolicy {
  readonly name: KeepAlivePolicyName;
  /** A call of `fnId` starts (a container has been found or is being made for it). */
  callStarted(fnId: string, now: number): void;
  /** A call of `fnId` ended. */
  callEnded(fnId: string, now: number): void;
  /** A container of `fnId` has just become idle: how long to keep it, when to pre-warm. */
  decide(fnId: string, idleTimeoutMs: number, now: number): KeepAliveDecision;
}

export type KeepAlivePolicyName = 'fixed' | 'histogram';

/** The range the histogram covers (the paper's 4 hours); idle times beyond it are "out of bounds". */
export const RANGE_MS = 4 * 3_600_000;
/** The most bins a histogram has (4 hours of 10 s bins); narrower bins cover a shorter range. */
export const MAX_BINS = 1440;
/** FNTS_KEEPALIVE_BIN_MSECS's default: 10 s, fine enough that a 45 s rhythm gets a pre-warm before it. */
export const DEFAULT_BIN_MS = 10_000;
/** The rhythm test (coefficient of variation) reads the counts in groups of this many bins: a minute at the default, the paper's resolution. */
export const CV_GROUP = 6;

/** How many bins a histogram of `binMs` bins has. */
export function binsFor(binMs: number): number {
  return Math.max(1, Math.min(MAX_BINS, Math.ceil(RANGE_MS / binMs)));
}
/** Fewer idle times than this: not representative. */
export const MIN_SAMPLES = 5;
/** Bin counts whose coefficient of variation is below this show no rhythm. */
export const MIN_CV = 2;
const HEAD_PERCENTILE = 0.05;
const TAIL_PERCENTILE = 0.99;
/** The paper's margins: pre-warm 10% before the head, keep 10% past the tail. */
const HEAD_MARGIN = 0.9;
const TAIL_MARGIN = 1.1;
/** More than this share of idle times beyond the range: forecast instead. */
const OUT_OF_BOUNDS_SHARE = 0.5;
/** How many out-of-range idle times the forecast averages. */
const FORECAST_SAMPLES = 4;
const FORECAST_EARLY = 0.85;
const FORECAST_LATE = 1.15;
/** Once a fn's counts reach this, they are halved: recent idle times weigh more. */
const AGE_AT = 200;
/** A pre-warm whose stay (cut by the idle_timeout) would hold less than this share of the idle times is not made. */
export const MIN_COVER = 0.5;
/** The most fns a policy remembers. */
export const MAX_FNS = 10_000;

/** Fn's rule: keep for idle_timeout, never pre-warm. */
export class FixedKeepAlive implements KeepAlivePolicy {
  readonly name = 'fixed';
  callStarted(): void {}
  callEnded(): void {}
  decide(_fnId: string, idleTimeoutMs: number): KeepAliveDecision {
    return fixedDecision(idleTimeoutMs);
  }
}

function fixedDecision(idleTimeoutMs: number): KeepAliveDecision {
  return { keepMs: idleTimeoutMs, prewarmInMs: undefined, prewarmKeepMs: 0, basis: 'fixed' };
}

/**
 * A histogram as stored (see HistogramStore): validated by
 * IdleHistogram.restore. Only the bins that hold counts are stored, as
 * [bin, count] pairs in bin order.
 */
export interface HistogramSnapshot {
  readonly binMs: number;
  readonly bins: number;
  readonly entries: ReadonlyArray<readonly [number, number]>;
  readonly outOfBounds: number;
  /** The last few idle times beyond the range, ms. */
  readonly recent: readonly number[];
}

/**
 * Where a fn's idle times fall after a call ends: when to pre-warm and
 * until when to keep, in ms after the call's end; undefined: fall back to
 * the fixed rule.
 */
export interface Windows {
  readonly prewarmAt: number;
  readonly keepUntil: number;
  readonly basis: 'histogram' | 'forecast';
}

/**
 * One fn's idle times: fixed-width bins (binsFor(binMs) of them), plus what
 * fell beyond them. Only bins that hold counts take memory (a fn with a
 * rhythm uses a handful), kept as parallel arrays in bin order.
 */
export class IdleHistogram {
  readonly bins: number;
  /** The bins that hold counts, ascending, and their counts. */
  private readonly at: number[] = [];
  private readonly counts: number[] = [];
  private inRange = 0;
  private outOfBounds = 0;
  private readonly recent: number[] = [];
  /** The windows for the current counts, worked out when they change. */
  private cached: Windows | undefined | null = null;
  /** Running sums of `counts` (prefix[k]: the first k), made when first needed after a change. */
  private prefix: number[] | undefined;
  /** bestStart's answer for the current counts and the last cap asked with. */
  private best: { capMs: number; start: number } | undefined;

  constructor(readonly binMs: number) {
    this.bins = binsFor(binMs);
  }

  get samples(): number {
    return this.inRange + this.outOfBounds;
  }

  add(idleMs: number): void {
    if (!Number.isFinite(idleMs) || idleMs < 0) return;
    const bin = Math.floor(idleMs / this.binMs);
    if (bin < this.bins) {
      this.count(bin, 1);
      this.inRange += 1;
    } else {
      this.outOfBounds += 1;
      this.recent.push(idleMs);
      if (this.recent.length > FORECAST_SAMPLES) this.recent.shift();
    }
    if (this.samples >= AGE_AT) this.age();
    this.cached = null;
    this.best = undefined;
    this.prefix = undefined;
  }

  /** Adds `n` to bin `bin`'s count. */
  private count(bin: number, n: number): void {
    const lo = this.firstAtOrAfter(bin);
    if (this.at[lo] === bin) this.counts[lo]! += n;
    else {
      this.at.splice(lo, 0, bin);
      this.counts.splice(lo, 0, n);
    }
  }

  private age(): void {
    // Counts that halving has worn down to nothing are dropped.
    let kept = 0;
    for (let i = 0; i < this.at.length; i++) {
      if (this.counts[i]! < 0.01) continue;
      this.at[kept] = this.at[i]!;
      this.counts[kept++] = this.counts[i]! / 2;
    }
    this.at.length = this.counts.length = kept;
    this.inRange = this.counts.reduce((a, b) => a + b, 0);
    this.outOfBounds /= 2;
  }

  /**
   * Coefficient of variation (standard deviation / mean) of the counts read
   * in groups of CV_GROUP bins over the whole range; 0 when empty.
   */
  cv(): number {
    if (this.inRange === 0) return 0;
    const groups = Math.ceil(this.bins / CV_GROUP);
    const mean = this.inRange / groups;
    let sq = 0;
    let group = -1;
    let sum = 0;
    for (let i = 0; i < this.at.length; i++) {
      const g = Math.floor(this.at[i]! / CV_GROUP);
      if (g !== group) {
        sq += sum * sum;
        [group, sum] = [g, 0];
      }
      sum += this.counts[i]!;
    }
    sq += sum * sum;
    // Σ(c - mean)² over all groups = Σc² - groups × mean² (empty groups included).
    return Math.sqrt(Math.max(0, sq / groups - mean * mean)) / mean;
  }

  /** The first bin at which the counts reach share `p` of those in range. */
  private binAt(p: number): number {
    const target = p * this.inRange;
    let sum = 0;
    for (let i = 0; i < this.at.length; i++) {
      sum += this.counts[i]!;
      if (sum >= target && sum > 0) return this.at[i]!;
    }
    return this.bins - 1;
  }

  /** Pre-warm and keep windows, or undefined when the histogram is not representative. */
  windows(): Windows | undefined {
    if (this.cached === null) this.cached = this.compute();
    return this.cached;
  }

  private compute(): Windows | undefined {
    if (this.samples < MIN_SAMPLES) return undefined;
    if (this.outOfBounds > OUT_OF_BOUNDS_SHARE * this.samples && this.recent.length > 0) {
      const forecast = this.recent.reduce((a, b) => a + b, 0) / this.recent.length;
      return { prewarmAt: forecast * FORECAST_EARLY, keepUntil: forecast * FORECAST_LATE, basis: 'forecast' };
    }
    if (this.inRange < MIN_SAMPLES || this.cv() < MIN_CV) return undefined;
    const head = this.binAt(HEAD_PERCENTILE) * this.binMs;
    const tail = (this.binAt(TAIL_PERCENTILE) + 1) * this.binMs;
    return { prewarmAt: head * HEAD_MARGIN, keepUntil: tail * TAIL_MARGIN, basis: 'histogram' };
  }

  /**
   * When to pre-warm so that a stay of at most `capMs` (the fn's
   * idle_timeout) covers the most likely idle times: the window's start
   * when it fits, else the start of the `capMs` stretch within it that
   * holds the most of the histogram (a forecast: the stretch centred on it).
   */
  bestStart(w: Windows, capMs: number): number {
    if (w.keepUntil - w.prewarmAt <= capMs) return w.prewarmAt;
    if (w.basis === 'forecast') return Math.max(w.prewarmAt, (w.prewarmAt + w.keepUntil) / 2 - capMs / 2);
    if (this.best?.capMs === capMs) return this.best.start;
    let best = w.prewarmAt;
    let bestMass = this.mass(best, best + capMs);
    // Around each bin holding counts, stretches that begin a margin before it, at its lower edge less a
    // margin of the stay, and that end at its upper edge; each within the window. The earliest of equals wins.
    for (const bin of this.at) {
      const lower = bin * this.binMs;
      for (const candidate of [lower * HEAD_MARGIN, lower - (1 - HEAD_MARGIN) * capMs, lower + this.binMs - capMs]) {
        const start = Math.min(Math.max(w.prewarmAt, candidate), w.keepUntil - capMs);
        const m = this.mass(start, start + capMs);
        if (m > bestMass || (m === bestMass && start < best)) [best, bestMass] = [start, m];
      }
    }
    this.best = { capMs, start: best };
    return best;
  }

  /** The share of the idle times in range that fall between `from` and `to` (ms). */
  share(from: number, to: number): number {
    return this.inRange > 0 ? this.mass(from, to) / this.inRange : 0;
  }

  /** The counts between times `from` and `to` (ms), a bin in part counted in proportion: two binary searches. */
  private mass(from: number, to: number): number {
    if (!(to > from) || this.at.length === 0) return 0;
    this.prefix ??= this.counts.reduce<number[]>((sums, c, i) => (sums.push(sums[i]! + c), sums), [0]);
    const first = Math.floor(from / this.binMs);
    const last = Math.floor(to / this.binMs);
    const i = this.firstAtOrAfter(first);
    const j = this.firstAtOrAfter(last + 1);
    if (j <= i) return 0;
    let sum = this.prefix[j]! - this.prefix[i]!;
    // The parts of the end bins outside [from, to).
    if (this.at[i] === first) sum -= (this.counts[i]! * (from - first * this.binMs)) / this.binMs;
    if (this.at[j - 1] === last) sum -= (this.counts[j - 1]! * ((last + 1) * this.binMs - to)) / this.binMs;
    return sum;
  }

  /** The index of the first bin holding counts at or after `bin` (`at.length` when none). */
  private firstAtOrAfter(bin: number): number {
    let lo = 0;
    let hi = this.at.length;
    while (lo < hi) {
      const mid = (lo + hi) >> 1;
      if (this.at[mid]! < bin) lo = mid + 1;
      else hi = mid;
    }
    return lo;
  }

  snapshot(): HistogramSnapshot {
    return { binMs: this.binMs, bins: this.bins, entries: this.at.map((bin, i) => [bin, this.counts[i]!] as const), outOfBounds: this.outOfBounds, recent: [...this.recent] };
  }

  /**
   * A histogram from what was stored, or undefined when it does not fit:
   * another bin width or number of bins (its counts would mean other
   * times), bins out of range or out of order, or a count that is not a
   * finite non-negative number. A dense `counts` array of every bin (how
   * histograms were stored at first) is read too.
   */
  static restore(s: unknown, binMs: number): IdleHistogram | undefined {
    if (typeof s !== 'object' || s === null) return undefined;
    const { binMs: width, bins, entries, counts, outOfBounds, recent } = s as Partial<Record<keyof HistogramSnapshot | 'counts', unknown>>;
    const count = (v: unknown): v is number => typeof v === 'number' && Number.isFinite(v) && v >= 0;
    const h = new IdleHistogram(binMs);
    if (width !== binMs || (bins !== undefined && bins !== h.bins) || !count(outOfBounds)) return undefined;
    if (!Array.isArray(recent) || recent.length > FORECAST_SAMPLES || !recent.every(count)) return undefined;
    let pairs: unknown[];
    if (Array.isArray(entries)) pairs = entries;
    else if (Array.isArray(counts) && counts.length === h.bins) pairs = counts.map((c, i) => [i, c]).filter(([, c]) => c !== 0);
    else return undefined;
    for (const pair of pairs) {
      if (!Array.isArray(pair) || pair.length !== 2) return undefined;
      const [bin, c] = pair as [unknown, unknown];
      if (!Number.isInteger(bin) || (bin as number) < 0 || (bin as number) >= h.bins || (bin as number) <= (h.at.at(-1) ?? -1) || !count(c)) return undefined;
      h.at.push(bin as number);
      h.counts.push(c);
      h.inRange += c;
    }
    h.outOfBounds = outOfBounds;
    h.recent.push(...recent);
    return h;
  }
}

interface FnRhythm {
  histogram: IdleHistogram;
  running: number;
  /** When its last call ended (no call running since); undefined before its first. */
  lastEnd: number | undefined;
}

export interface HistogramKeepAliveOptions {
  /** FNTS_KEEPALIVE_BIN_MSECS: the width of a bin (DEFAULT_BIN_MS; 60000 in the paper). */
  readonly binMs: number;
}

/** The histogram policy (see the file's comment). */
export class HistogramKeepAlive implements KeepAlivePolicy {
  readonly name = 'histogram';
  private readonly fns = new Map<string, FnRhythm>();
  /** Fns whose histograms gained an idle time since takeChanged() (a subset of `fns`). */
  private readonly changed = new Set<string>();

  constructor(private readonly o: HistogramKeepAliveOptions) {}

  private rhythm(fnId: string): FnRhythm {
    let r = this.fns.get(fnId);
    if (r) {
      // Most recently used last: the first entry is the one to forget.
      this.fns.delete(fnId);
    } else {
      r = { histogram: new IdleHistogram(this.o.binMs), running: 0, lastEnd: undefined };
      if (this.fns.size >= MAX_FNS) {
        const oldest = this.fns.keys().next().value!;
        this.fns.delete(oldest);
        this.changed.delete(oldest);
      }
    }
    this.fns.set(fnId, r);
    return r;
  }

  /** A stored histogram for `fnId` (one whose bin width differs is ignored). */
  load(fnId: string, snapshot: unknown): boolean {
    const h = IdleHistogram.restore(snapshot, this.o.binMs);
    if (!h) return false;
    this.rhythm(fnId).histogram = h;
    return true;
  }

  /** The fns whose histograms changed since the last time asked, with their snapshots (to store them). */
  takeChanged(): Array<{ fnId: string; snapshot: HistogramSnapshot }> {
    const out: Array<{ fnId: string; snapshot: HistogramSnapshot }> = [];
    for (const fnId of this.changed) {
      const h = this.fns.get(fnId)?.histogram;
      if (h) out.push({ fnId, snapshot: h.snapshot() });
    }
    this.changed.clear();
    return out;
  }

  histogram(fnId: string): IdleHistogram | undefined {
    return this.fns.get(fnId)?.histogram;
  }

  callStarted(fnId: string, now: number): void {
    const r = this.rhythm(fnId);
    if (r.running === 0 && r.lastEnd !== undefined) {
      r.histogram.add(now - r.lastEnd);
      this.changed.add(fnId);
    }
    r.running++;
  }

  callEnded(fnId: string, now: number): void {
    const r = this.fns.get(fnId);
    if (!r || r.running === 0) return;
    if (--r.running === 0) r.lastEnd = now;
  }

  decide(fnId: string, idleTimeoutMs: number, now: number): KeepAliveDecision {
    const r = this.fns.get(fnId);
    const w = r?.histogram.windows();
    if (!r || !w) return fixedDecision(idleTimeoutMs);
    const cap = (ms: number): number => Math.max(0, Math.min(ms, idleTimeoutMs));
    // While another call of the fn runs the fn is not idle: keep for the tail.
    const since = r.running > 0 || r.lastEnd === undefined ? 0 : Math.max(0, now - r.lastEnd);
    if (r.running > 0 || w.prewarmAt <= since) return { keepMs: cap(w.keepUntil - since), prewarmInMs: undefined, prewarmKeepMs: 0, basis: w.basis };
    const at = r.histogram.bestStart(w, idleTimeoutMs);
    const keep = cap(w.keepUntil - at);
    // A stay the idle_timeout cuts so short that it would catch few calls: a pre-warm not worth its start.
    if (w.basis === 'histogram' && r.histogram.share(at, at + keep) < MIN_COVER) return fixedDecision(idleTimeoutMs);
    return { keepMs: 0, prewarmInMs: Math.max(0, at - since), prewarmKeepMs: keep, basis: w.basis };
  }
}

/** The policy FNTS_KEEPALIVE_POLICY names. */
export function keepAlivePolicy(name: KeepAlivePolicyName, o: HistogramKeepAliveOptions): KeepAlivePolicy {
  return name === 'histogram' ? new HistogramKeepAlive(o) : new FixedKeepAlive();
}
