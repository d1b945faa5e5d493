/**
 * Deadlines: "do this when the time is up, unless the work is done first",
 * the one shape behind a call's timeout, a container's start timeout, a
 * bounded wait for an answer and a bounded shutdown. The timer is released
 * on every path (clear() once the work is done; within() does it itself),
 * and a deadline that passes acts exactly once.
 *
 * A deadline is on the process's real timers: the agent's idle clocks,
 * which tests drive by hand, go through agent/clock.ts instead.
 */

export interface DeadlineOptions {
  /** Whether the process may exit while the deadline is pending (default false: the timer holds it, as setTimeout's does). */
  readonly unref?: boolean;
}

export class Deadline {
  private timer: NodeJS.Timeout | undefined;
  private passed = false;

  /**
   * `onExpiry` runs once `ms` have passed (at once, on a later turn of the
   * event loop, when `ms` <= 0) unless clear() came first. It runs from a
   * timer: it must not throw.
   */
  constructor(ms: number, onExpiry: () => void, options?: DeadlineOptions) {
    this.timer = setTimeout(
      () => {
        this.timer = undefined;
        // Set first: what onExpiry sets off may ask whether the time is up.
        this.passed = true;
        onExpiry();
      },
      Math.max(0, ms),
    );
    if (options?.unref) this.timer.unref();
  }

  /** A deadline at a time of the wall clock (ms since the epoch, or a Date). */
  static at(time: number | Date, onExpiry: () => void, options?: DeadlineOptions): Deadline {
    return new Deadline((typeof time === 'number' ? time : time.getTime()) - Date.now(), onExpiry, options);
  }

  /** Whether the time was up (onExpiry has run). */
  get expired(): boolean {
    return this.passed;
  }

  /** The work is done: onExpiry will not run. Harmless once it has, and when called again. */
  clear(): void {
    clearTimeout(this.timer);
    this.timer = undefined;
  }
}

/**
 * What `work` settles with, or, when `ms` pass first, what `late()` returns
 * (late() runs then, once: it may also stop the work, e.g. abort it). The
 * timer is released as soon as either comes. `work` is taken as started:
 * its rejection, even after the deadline, is handled here.
 */
export function within<T, L>(work: PromiseLike<T>, ms: number, late: () => L, options?: DeadlineOptions): Promise<T | L> {
  return new Promise<T | L>((resolve, reject) => {
    const deadline = new Deadline(
      ms,
      () => {
        try {
          resolve(late());
        } catch (err) {
          reject(err);
        }
      },
      options,
    );
    work.then(
      (value) => {
        deadline.clear();
        resolve(value);
      },
      (err: unknown) => {
        deadline.clear();
        reject(err);
      },
    );
  });
}
