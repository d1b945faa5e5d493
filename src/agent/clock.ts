/**
 * Time as the agent reads it: idle clocks, freezing, eviction and launch
 * polls all go through a Clock, so tests can drive time instead of sleeping.
 */

export interface Timer {
  /** Stops the timer; harmless once it has fired. */
  clear(): void;
}

export interface Clock {
  /** Milliseconds, monotonic (performance.now() in production). */
  now(): number;
  /** Calls `fn` once after `ms`. Production timers never keep the process alive. */
  setTimeout(fn: () => void, ms: number): Timer;
}

export const realClock: Clock = {
  now: () => performance.now(),
  setTimeout(fn, ms) {
    const t = setTimeout(fn, ms);
    t.unref();
    return { clear: () => clearTimeout(t) };
  },
};

/** A clock that moves only when told: advance() fires what falls due, in order. */
export class ManualClock implements Clock {
  private t = 0;
  private seq = 0;
  private readonly timers = new Map<number, { at: number; fn: () => void }>();

  now(): number {
    return this.t;
  }

  setTimeout(fn: () => void, ms: number): Timer {
    const id = this.seq++;
    this.timers.set(id, { at: this.t + Math.max(0, ms), fn });
    return { clear: () => this.timers.delete(id) };
  }

  /** Moves time on by `ms`, firing each timer that falls due at its own time. */
  advance(ms: number): void {
    const end = this.t + ms;
    for (;;) {
      let next: [number, { at: number; fn: () => void }] | undefined;
      for (const entry of this.timers) if (entry[1].at <= end && (!next || entry[1].at < next[1].at)) next = entry;
      if (!next) break;
      this.timers.delete(next[0]);
      this.t = Math.max(this.t, next[1].at);
      next[1].fn();
    }
    this.t = end;
  }

  /** Timers not yet fired. */
  get pending(): number {
    return this.timers.size;
  }
}
