/**
 * How many of a container's output lines reach the server's log: a token
 * bucket per container, so that one chatty function cannot drown the server
 * log (and the disk or collector behind it) for everyone else. Lines over
 * the limit are dropped from the server log only (the call's own log keeps
 * them) and counted; one report says how many.
 *
 *   admitting --a line finds the bucket empty--> dropping (lines counted, no tokens taken)
 *   dropping --the bucket is full again, or the container ends--> report the count; admitting
 *
 * Dropping lasts until the bucket has refilled completely (LINE_BURST /
 * LINES_PER_SECOND, 2 s): a sustained flood then yields at most a burst and
 * one report every 2 s, rather than a line and a report each time a token
 * comes back.
 */
import type { Clock, Timer } from './clock.js';

/** Lines a second one container may send to the server log in the long run: plenty for a function logging what it does, far below a loop printing. */
export const LINES_PER_SECOND = 100;
/** Lines a container may send at once: a stack trace or a startup banner passes whole. */
export const LINE_BURST = 200;

export class LineLimiter {
  private tokens: number;
  /** The clock's time when `tokens` was last brought up to date. */
  private at: number;
  /** Lines dropped since the last report; more than 0 while dropping. */
  private dropped = 0;
  private timer: Timer | undefined;

  /**
   * `onDropped` is told each count of dropped lines, once per episode; it
   * must not throw (it runs from a timer).
   */
  constructor(
    private readonly clock: Clock,
    private readonly onDropped: (lines: number) => void,
    private readonly perSecond = LINES_PER_SECOND,
    private readonly burst = LINE_BURST,
  ) {
    this.tokens = burst;
    this.at = clock.now();
  }

  /** True when the next line may go to the server log; false when it is dropped (and counted). */
  admit(): boolean {
    if (this.dropped > 0) {
      this.dropped++;
      return false;
    }
    const now = this.clock.now();
    this.tokens = Math.min(this.burst, this.tokens + ((now - this.at) * this.perSecond) / 1000);
    this.at = now;
    if (this.tokens >= 1) {
      this.tokens--;
      return true;
    }
    this.dropped = 1;
    // Dropped lines take no tokens, so the bucket is full again at a known time.
    this.timer = this.clock.setTimeout(() => this.report(), ((this.burst - this.tokens) * 1000) / this.perSecond);
    return false;
  }

  /** The container has ended: lines dropped and not yet reported are reported now. Idempotent. */
  close(): void {
    this.report();
  }

  private report(): void {
    this.timer?.clear();
    this.timer = undefined;
    const dropped = this.dropped;
    if (dropped === 0) return;
    this.dropped = 0;
    this.onDropped(dropped);
  }
}
