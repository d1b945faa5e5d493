/**
 * The console's live figures: one timer for every listener, fast while
 * someone listens, slow while nobody does (so the charts have the last
 * minutes to show the moment a console opens), and a short history of what
 * it saw.
 *
 *   recording ──subscribe──▶ live (a reading every intervalMs, told to each listener)
 *   (a reading every               │
 *    recordMs, history only) ◀── last unsubscribe
 *
 * Listeners are bounded (`maxListeners`): a stream beyond them is refused,
 * so a page left open in many tabs cannot make the node's work grow without
 * bound. A tick still running when the next is due is not doubled: the due
 * one is skipped.
 */
import type { Reading } from './figures.js';

/** One point of the charts' history: the node's figures at `at` (ms since the epoch). */
export interface HistoryPoint {
  readonly at: number;
  readonly calls_per_s: number | null;
  readonly errors_per_s: number | null;
  readonly p95_ms: number | null;
  readonly busy: number | null;
  readonly memory_used_bytes: number | null;
}

export interface PulseOptions {
  /** Reads the node's figures now. May be slow (ticks do not overlap); a rejection skips the tick. */
  readonly read: () => Promise<Reading>;
  /** Default 2000 ms: the console's figures are at most this old. */
  readonly intervalMs?: number;
  /** Default 32 streams at once. */
  readonly maxListeners?: number;
  /** How much history is kept, default 15 minutes. */
  readonly historyMs?: number;
  /** While nobody listens, a reading for the history every this many ms; default 10000; 0: none (the history has gaps where nobody listened). */
  readonly recordMs?: number;
  /** The history point of a reading (with the one before it, when rates can be taken). */
  readonly point: (before: Reading | undefined, after: Reading) => HistoryPoint;
  /** Told when a tick fails (the registry or a gauge's collect threw). */
  readonly onError?: (err: unknown) => void;
}

/**
 * Told each reading with the one before it (undefined for the first since
 * the timer started). Must not block or throw; a throw is caught and the
 * listener removed (its stream is gone).
 */
export type PulseListener = (before: Reading | undefined, after: Reading) => void;

export class Pulse {
  readonly intervalMs: number;
  readonly maxListeners: number;
  private readonly historyMs: number;
  private readonly recordMs: number;
  private readonly listeners = new Set<PulseListener>();
  private timer: NodeJS.Timeout | undefined;
  private ticking = false;
  private closed = false;
  /** The last reading: what the next one is rated against. */
  private last: Reading | undefined;
  /** The points of the last historyMs, oldest first (gaps where nobody listened). */
  private readonly points: HistoryPoint[] = [];

  constructor(private readonly o: PulseOptions) {
    this.intervalMs = o.intervalMs ?? 2000;
    this.maxListeners = o.maxListeners ?? 32;
    this.historyMs = o.historyMs ?? 15 * 60_000;
    this.recordMs = o.recordMs ?? 10_000;
    this.every(this.recordMs);
  }

  /** How many listen now. */
  get size(): number {
    return this.listeners.size;
  }

  /** Whether the live timer runs (someone listens). */
  get running(): boolean {
    return this.listeners.size > 0;
  }

  /** Ticks every `ms` from now on (0: not at all), in place of the timer before. */
  private every(ms: number): void {
    if (this.timer) clearInterval(this.timer);
    this.timer = undefined;
    if (ms <= 0 || this.closed) return;
    this.timer = setInterval(() => void this.tick(), ms);
    this.timer.unref();
  }

  /** Adds a listener; false when maxListeners already listen or the pulse is closed. Starts the timer for the first. */
  subscribe(listener: PulseListener): boolean {
    if (this.closed || this.listeners.size >= this.maxListeners) return false;
    if (this.listeners.has(listener)) return true;
    this.listeners.add(listener);
    if (this.listeners.size === 1) {
      this.every(this.intervalMs);
      void this.tick();
    }
    return true;
  }

  /** Removes a listener (idempotent); the last one out slows the timer down to recording. */
  unsubscribe(listener: PulseListener): void {
    if (this.listeners.delete(listener) && this.listeners.size === 0) this.every(this.recordMs);
  }

  /** The points kept, oldest first. */
  history(): readonly HistoryPoint[] {
    return this.points;
  }

  /**
   * A reading now, with the one to rate it against: the timer's last while
   * it runs (the figures the streams were told), else the last one taken
   * here (the rates are then over the time since: `interval_s` says how long).
   */
  async latest(): Promise<{ before: Reading | undefined; after: Reading }> {
    const before = this.last;
    const after = await this.o.read();
    if (!this.running) this.last = after;
    return { before, after };
  }

  /** Stops the timer and drops every listener; subscribe() refuses from now on. Idempotent. */
  close(): void {
    this.closed = true;
    for (const l of [...this.listeners]) this.unsubscribe(l);
    this.every(0);
  }

  private async tick(): Promise<void> {
    if (this.ticking) return;
    this.ticking = true;
    try {
      const reading = await this.o.read();
      // After a gap (a tick skipped, or no recording) the last reading is too old to rate against.
      const previous = this.last && reading.at - this.last.at <= 2 * Math.max(this.intervalMs, this.recordMs) ? this.last : undefined;
      this.last = reading;
      this.keep(this.o.point(previous, reading));
      for (const l of [...this.listeners]) {
        try {
          l(previous, reading);
        } catch {
          this.unsubscribe(l);
        }
      }
    } catch (err) {
      this.o.onError?.(err);
    } finally {
      this.ticking = false;
    }
  }

  private keep(point: HistoryPoint): void {
    this.points.push(point);
    const oldest = point.at - this.historyMs;
    let drop = 0;
    while (drop < this.points.length && this.points[drop]!.at < oldest) drop++;
    if (drop > 0) this.points.splice(0, drop);
  }
}
