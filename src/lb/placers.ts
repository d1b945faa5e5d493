/**
 * The placers FN_PLACER chooses from (see placer.ts for the rules they keep):
 *
 * - `naive`: round-robin, as Fn's naive placer. Spreads load evenly and knows
 *   nothing of functions, so every fn ends up warm on every runner.
 * - `ch`: consistent hashing, as Fn's ch placer. A fn always starts on the
 *   same runner (its "home"), so it stays warm in one place; load follows
 *   the fns' popularity, however uneven.
 * - `wait` (the default; Fn's 2017 fnlb placed by wait time too): starts
 *   at the fn's home like `ch`, but moves on when waiting there is expected
 *   to cost more than starting a container elsewhere, and when the home
 *   carries far more than its share.
 *
 * `ch` and `wait` hash a fn onto the pool's list with Jump Consistent Hash
 * (Lamping & Veach, 2014) over the whole list, up or down, so that a runner
 * going down moves only the fns whose home it was, and every LB given the
 * same list picks the same home.
 */
import { createHash } from 'node:crypto';
import type { AttemptReport, Placer, PlacerName, RunnerView } from './placer.js';

// ----------------------------------------------------------------- hashing

/** A 64-bit key as two unsigned 32-bit halves (no BigInt on the call path). */
interface Key64 {
  readonly hi: number;
  readonly lo: number;
}

/** How many fn ids a KeyCache remembers before it starts over. */
const KEY_CACHE_MAX = 10_000;

/**
 * fn id -> 64-bit key (the first 8 bytes of its SHA-1), cached so that
 * order() hashes a fn only when it has not seen it lately. The cache is
 * cleared when full: a miss costs one hash, which is cheaper than keeping
 * recency on every call.
 */
class KeyCache {
  private readonly keys = new Map<string, Key64>();

  get(fnId: string): Key64 {
    let key = this.keys.get(fnId);
    if (key === undefined) {
      const digest = createHash('sha1').update(fnId).digest();
      key = { hi: digest.readUInt32BE(0), lo: digest.readUInt32BE(4) };
      if (this.keys.size >= KEY_CACHE_MAX) this.keys.clear();
      this.keys.set(fnId, key);
    }
    return key;
  }
}

// The jump hash's 64-bit LCG multiplier, 2862933555777941757, in halves.
const MUL_HI = 0x27bb2ee6;
const MUL_LO = 0x87b0b0fd;
const MUL_LO_0 = MUL_LO & 0xffff;
const MUL_LO_1 = MUL_LO >>> 16;

/**
 * Jump Consistent Hash: the bucket in [0, buckets) of the 64-bit key
 * hi:lo (-1 when buckets < 1). Growing `buckets` from n to n+1 moves only
 * the keys that land in the new bucket, about 1/(n+1) of them.
 *
 * The key's 64-bit arithmetic (key = key * MUL + 1 mod 2^64) is done on
 * 32-bit halves, so the loop allocates nothing.
 */
export function jumpHash(hi: number, lo: number, buckets: number): number {
  let b = -1;
  let j = 0;
  while (j < buckets) {
    b = j;
    // High half of the 64-bit product lo * MUL_LO, from 16-bit pieces (each product < 2^32, exact).
    const lo0 = lo & 0xffff;
    const lo1 = lo >>> 16;
    const p00 = lo0 * MUL_LO_0;
    const p01 = lo0 * MUL_LO_1;
    const p10 = lo1 * MUL_LO_0;
    const mid = (p00 >>> 16) + (p01 & 0xffff) + (p10 & 0xffff);
    const carry = lo1 * MUL_LO_1 + (p01 >>> 16) + (p10 >>> 16) + (mid >>> 16);
    const low = Math.imul(lo, MUL_LO) >>> 0;
    hi = (carry + Math.imul(hi, MUL_LO) + Math.imul(lo, MUL_HI)) >>> 0;
    lo = (low + 1) >>> 0;
    if (lo === 0) hi = (hi + 1) >>> 0;
    // (key >> 33) is the top 31 bits: hi >>> 1.
    j = Math.floor((b + 1) * (2147483648 / ((hi >>> 1) + 1)));
  }
  return b;
}

// ------------------------------------------------------------------- naive

export interface NaivePlacerOptions {
  /** Where the first round starts: a number in [0, 1). Default Math.random, so LBs do not all start on the same runner. */
  readonly random?: (() => number) | undefined;
}

/**
 * Round-robin over the runners that are up, as Fn's naive placer: each call
 * starts one runner further on than the call before, from a random offset
 * chosen at construction, and its round goes once around all up runners
 * from there. Even load, no affinity: a fn's calls visit every runner, so
 * each runner ends up starting containers for every fn.
 */
export class NaivePlacer implements Placer {
  readonly name = 'naive';
  /** Counts calls from the random offset; a double stays exact for 2^53 calls. */
  private next: number;

  constructor(options: NaivePlacerOptions = {}) {
    const random = options.random ?? Math.random;
    this.next = Math.floor(random() * 0x1_0000_0000);
  }

  order(_fnId: string, runners: readonly RunnerView[]): RunnerView[] {
    let up = 0;
    for (const r of runners) if (r.up) up++;
    if (up === 0) return [];
    // Start at the (next mod up)-th up runner.
    let skip = this.next % up;
    this.next++;
    const n = runners.length;
    let i = 0;
    for (; i < n; i++) {
      if (runners[i]!.up && skip-- === 0) break;
    }
    const out = new Array<RunnerView>(up);
    let k = 0;
    for (let step = 0; step < n; step++) {
      const r = runners[i]!;
      if (++i === n) i = 0;
      if (r.up) out[k++] = r;
    }
    return out;
  }

  report(): void {
    // Round-robin learns nothing from how attempts went.
  }
}

// ---------------------------------------------------------------------- ch

/**
 * Consistent hashing, as Fn's ch placer: a fn's home is the jump hash of its
 * id over the whole runner list (up or down), and its round goes around the
 * list from there, skipping runners that are down. A fn therefore stays on
 * one runner, warm, and a runner going down sends only its own fns to the
 * next runner on, leaving every other fn where it was. Load is as uneven as
 * the fns' popularity: a hot fn's home carries all of it.
 *
 * The home is an index into the list, so every LB must see the list in the
 * same order (the pool's stable order) to agree on it.
 */
export class ConsistentHashPlacer implements Placer {
  readonly name = 'ch';
  private readonly keys = new KeyCache();

  order(fnId: string, runners: readonly RunnerView[]): RunnerView[] {
    const n = runners.length;
    const out: RunnerView[] = [];
    if (n === 0) return out;
    const key = this.keys.get(fnId);
    let i = jumpHash(key.hi, key.lo, n);
    for (let step = 0; step < n; step++) {
      const r = runners[i]!;
      if (++i === n) i = 0;
      if (r.up) out.push(r);
    }
    return out;
  }

  report(): void {
    // Placement depends on the fn id alone.
  }
}

// -------------------------------------------------------------------- wait

export interface WaitPlacerOptions {
  /** Cost of starting a container (ms) assumed until runners report real ones. Default 500. */
  readonly coldStartMs?: number | undefined;
  /**
   * Bounded load: a runner is tried only after the others when its inFlight
   * exceeds max(1, ceil((1 + epsilon) * mean inFlight of up runners)). Default 0.25.
   */
  readonly epsilon?: number | undefined;
  /** Weight of a new sample in the moving averages, in (0, 1]. Default 0.2: about the last 10 calls. */
  readonly alpha?: number | undefined;
  /**
   * How fast an expected wait that no report refreshes fades (half-life, ms).
   * A runner that is passed over gets no calls and so no reports; without
   * this a single bad moment would keep a fn away from its home until the
   * entry is forgotten. Default 10 s; Infinity turns fading off.
   */
  readonly decayHalfLifeMs?: number | undefined;
  /** A (runner, fn) pair not reported for this long is forgotten. Default 10 minutes. */
  readonly forgetAfterMs?: number | undefined;
  /** Most (runner, fn) pairs kept; the least recently reported fns go first. Default 100,000. */
  readonly maxEntries?: number | undefined;
  /** Monotonic milliseconds. Default performance.now. */
  readonly now?: (() => number) | undefined;
}

/** What this LB expects a call of one fn to wait for a container on one runner. */
interface WaitEntry {
  /** Moving average of reported waits (ms), or the penalty set by a refusal. */
  wait: number;
  /** When `wait` was last set (the `now` clock). */
  at: number;
  /** When a call of the fn last ran there (-Infinity: never, as far as this LB knows). */
  ranAt: number;
}

/**
 * A refusal from a runner where the fn ran this recently (ms) says its
 * containers there are busy, not that it is cold there: one is free within
 * a call's time, and the LB's wait line sends the call back when it is. So
 * no penalty: moving the fn's next calls elsewhere would start containers
 * for it there (measured: bench/fleet.mts, wait started 44-47 containers to
 * ch's 29-30 while it did).
 */
const WARM_REFUSAL_MS = 2000;

/** Reports between two sweeps for forgotten entries. */
const SWEEP_EVERY = 1024;

/**
 * Wait-time placement (after Fn's 2017 fnlb, which kept an average of the
 * wait each node reported per fn): keep a fn warm on its home runner, and
 * go elsewhere when waiting there would cost more than starting a
 * container somewhere else.
 *
 * It learns from report():
 * - per (runner, fn), a moving average (EWMA) of the time calls waited for a
 *   container there. A call that had to start its own container reports
 *   that start as part of its wait; that part is left out, since it says the
 *   fn was cold, not that the runner is busy (and the fn is warm there now).
 * - the cost of a cold start, an EWMA of every reported `startMs`.
 * - 'failed' sets the pair's expected wait to twice the cold start cost,
 *   'refused' to just above it (1.1 times: a refusal says the runner is
 *   full right now, not that the fn is slow there, so with the default
 *   half-life its calls return about 1.4 s later rather than 10 s): the
 *   next calls prefer another runner. It comes back down as calls report
 *   low waits there, or as time passes (decayHalfLifeMs). A refusal from a
 *   runner where the fn ran in the last WARM_REFUSAL_MS costs nothing: its
 *   containers there are busy, and one is free within a call's time. A
 *   refusal that says when the runner could make room (fnts runners do)
 *   sets the expected wait to that time plus a cold start.
 *
 * A round walks the ring of runners from the fn's consistent-hash home (the
 * same home as `ch`) and puts each up runner either in the front part, in
 * ring order, or, when it is passed over, in the back part, soonest
 * expected wait first (so a call every runner refused is offered first,
 * and the LB asks to make room, where room comes soonest). A runner is
 * passed over when
 * - its expected wait for this fn exceeds the cold start cost, or
 * - its inFlight exceeds max(1, ceil((1 + epsilon) * mean inFlight)):
 *   consistent hashing with bounded load, so a hot fn's home is not buried.
 * Every up runner appears exactly once; passed-over runners are still tried
 * when the others refuse.
 *
 * Memory: pairs not reported for forgetAfterMs are dropped by a sweep every
 * 1024 reports, and at most maxEntries pairs are kept.
 */
export class WaitPlacer implements Placer {
  readonly name = 'wait';
  private readonly keys = new KeyCache();
  /** fnId -> runner address -> entry; fns in order of their last report (least recent first). */
  private readonly waits = new Map<string, Map<string, WaitEntry>>();
  private entries = 0;
  private reportsSinceSweep = 0;
  private coldMs: number;
  private readonly epsilon: number;
  private readonly alpha: number;
  private readonly halfLifeMs: number;
  private readonly forgetAfterMs: number;
  private readonly maxEntries: number;
  private readonly now: () => number;

  constructor(options: WaitPlacerOptions = {}) {
    this.coldMs = options.coldStartMs ?? 500;
    this.epsilon = options.epsilon ?? 0.25;
    this.alpha = options.alpha ?? 0.2;
    this.halfLifeMs = options.decayHalfLifeMs ?? 10_000;
    this.forgetAfterMs = options.forgetAfterMs ?? 10 * 60_000;
    this.maxEntries = options.maxEntries ?? 100_000;
    this.now = options.now ?? (() => performance.now());
    if (!(this.coldMs >= 0 && Number.isFinite(this.coldMs))) throw new RangeError(`coldStartMs must be a finite number >= 0, got ${this.coldMs}`);
    if (!(this.epsilon >= 0)) throw new RangeError(`epsilon must be >= 0, got ${this.epsilon}`);
    if (!(this.alpha > 0 && this.alpha <= 1)) throw new RangeError(`alpha must be in (0, 1], got ${this.alpha}`);
    if (!(this.halfLifeMs > 0)) throw new RangeError(`decayHalfLifeMs must be > 0, got ${this.halfLifeMs}`);
    if (!(this.forgetAfterMs > 0)) throw new RangeError(`forgetAfterMs must be > 0, got ${this.forgetAfterMs}`);
    if (!(this.maxEntries >= 1)) throw new RangeError(`maxEntries must be >= 1, got ${this.maxEntries}`);
  }

  /** The current estimate of a cold start's cost (ms). */
  get coldStartMs(): number {
    return this.coldMs;
  }

  /** (runner, fn) pairs remembered now. */
  get size(): number {
    return this.entries;
  }

  order(fnId: string, runners: readonly RunnerView[]): RunnerView[] {
    const n = runners.length;
    let up = 0;
    let load = 0;
    for (const r of runners) {
      if (r.up) {
        up++;
        load += r.inFlight;
      }
    }
    if (up === 0) return [];
    const bound = Math.max(1, Math.ceil(((1 + this.epsilon) * load) / up));
    const byRunner = this.waits.get(fnId);
    const now = byRunner === undefined ? 0 : this.now();
    const cold = this.coldMs;

    // Front part in ring order; the passed-over part after it, soonest expected wait first (ring order among equals).
    const out = new Array<RunnerView>(up);
    let front = 0;
    let passed: Array<{ r: RunnerView; wait: number }> | undefined;
    const key = this.keys.get(fnId);
    let i = jumpHash(key.hi, key.lo, n);
    for (let step = 0; step < n; step++) {
      const r = runners[i]!;
      if (++i === n) i = 0;
      if (!r.up) continue;
      const entry = byRunner?.get(r.address);
      const wait = entry === undefined ? 0 : this.expected(entry, now);
      if (r.inFlight > bound || wait > cold) (passed ??= []).push({ r, wait });
      else out[front++] = r;
    }
    if (passed) {
      passed.sort((a, b) => a.wait - b.wait);
      for (const p of passed) out[front++] = p.r;
    }
    return out;
  }

  report(fnId: string, runner: RunnerView, report: AttemptReport): void {
    const now = this.now();
    let byRunner = this.waits.get(fnId);
    if (byRunner === undefined) {
      byRunner = new Map();
    } else {
      // Keep fns in order of their last report, so a full table drops the stalest first.
      this.waits.delete(fnId);
    }
    this.waits.set(fnId, byRunner);
    let entry = byRunner.get(runner.address);
    const known = entry !== undefined && now - entry.at < this.forgetAfterMs;
    if (entry === undefined) {
      entry = { wait: 0, at: now, ranAt: -Infinity };
      byRunner.set(runner.address, entry);
      this.entries++;
    }
    const previous = known ? this.expected(entry, now) : 0;

    if (report.kind === 'ran') {
      const startMs = nonNegative(report.startMs);
      if (startMs !== undefined) this.coldMs += this.alpha * (startMs - this.coldMs);
      const wait = Math.max(0, (nonNegative(report.waitMs) ?? 0) - (startMs ?? 0));
      entry.wait = known ? previous + this.alpha * (wait - previous) : wait;
      entry.ranAt = now;
      entry.at = now;
    } else if (report.kind === 'failed') {
      entry.wait = Math.max(previous, 2 * this.coldMs);
      entry.at = now;
    } else if (now - entry.ranAt >= WARM_REFUSAL_MS) {
      // The runner's own word on when it could make room, and a start then; else just above a start.
      const roomMs = nonNegative(report.roomMs);
      entry.wait = roomMs !== undefined ? roomMs + this.coldMs : Math.max(previous, 1.1 * this.coldMs);
      entry.at = now;
    }

    if (++this.reportsSinceSweep >= SWEEP_EVERY) this.sweep(now);
    if (this.entries > this.maxEntries) {
      this.sweep(now);
      this.trim(Math.floor(this.maxEntries * 0.9));
    }
  }

  /** `entry`'s wait as of `now`: faded by its age, and 0 once forgotten. */
  private expected(entry: WaitEntry, now: number): number {
    if (entry.wait === 0) return 0;
    const age = now - entry.at;
    if (age <= 0) return entry.wait;
    if (age >= this.forgetAfterMs) return 0;
    return entry.wait * Math.pow(0.5, age / this.halfLifeMs);
  }

  /** Drops the pairs not reported for forgetAfterMs, and fns left with none. */
  private sweep(now: number): void {
    this.reportsSinceSweep = 0;
    const horizon = now - this.forgetAfterMs;
    for (const [fnId, byRunner] of this.waits) {
      for (const [address, entry] of byRunner) {
        if (entry.at <= horizon) {
          byRunner.delete(address);
          this.entries--;
        }
      }
      if (byRunner.size === 0) this.waits.delete(fnId);
    }
  }

  /** Drops whole fns, least recently reported first, until at most `target` pairs remain. */
  private trim(target: number): void {
    for (const [fnId, byRunner] of this.waits) {
      if (this.entries <= target) return;
      this.entries -= byRunner.size;
      this.waits.delete(fnId);
    }
  }
}

/** `x` when it is a finite number >= 0, else undefined (report() must not throw on odd input). */
function nonNegative(x: number | undefined): number | undefined {
  return x !== undefined && Number.isFinite(x) && x >= 0 ? x : undefined;
}

// ----------------------------------------------------------------- factory

export type PlacerOptions = NaivePlacerOptions & WaitPlacerOptions;

/** The placer FN_PLACER names; `options` apply to the ones that take them. */
export function createPlacer(name: PlacerName, options: PlacerOptions = {}): Placer {
  switch (name) {
    case 'naive':
      return new NaivePlacer(options);
    case 'ch':
      return new ConsistentHashPlacer();
    case 'wait':
      return new WaitPlacer(options);
    default:
      throw new RangeError(`unknown placer ${String(name satisfies never)}`);
  }
}
