/**
 * Slot queues (as Fn's api/agent/slots.go). One queue per set of
 * interchangeable hot containers (same app, fn, image, resources, timeouts
 * and config); the key is a hash of all of that. A queue holds the idle
 * containers and the calls waiting for one:
 *
 *     calls ──acquire──▶ [waiters, FIFO] ◀──match──▶ [idle containers, LIFO] ◀──release── containers
 *
 * An idle container goes to the oldest waiting call; with nobody waiting it
 * is pushed on the idle stack, and a call takes the most recently used one
 * (warm caches, and the least recently used ones age out). The queue also
 * counts calls waiting, containers starting and calls running, with moving
 * averages of how long each state lasts: the launch decision reads them.
 */
import { createHash } from 'node:crypto';

export type SlotState = 'wait' | 'start' | 'run';

export interface SlotStats {
  readonly waiting: number;
  /** Containers asked for: waiting for resources, or being created and started. */
  readonly starting: number;
  readonly running: number;
  readonly idle: number;
  /** How long the oldest waiting call has waited, ms (0 when none waits). */
  readonly oldestWaitMs: number;
  /** Of `starting`, those that hold their resources and are being created and started. */
  readonly launching: number;
  /** How long the oldest of those has been at it, ms (0 when none): a start takes at least that long. */
  readonly oldestLaunchMs: number;
  /** Exponentially weighted moving averages, ms; 0 until measured. */
  readonly latency: Readonly<Record<SlotState, number>>;
}

interface Waiter<T> {
  readonly since: number;
  readonly resolve: (item: T) => void;
  readonly reject: (err: unknown) => void;
  readonly detach: () => void;
  /** Past its soft deadline, kept only while a launch is tied to it: the deadline's reason. */
  overdue?: unknown;
}

export class SlotQueue<T> {
  private readonly idle: T[] = [];
  private readonly waiters: Waiter<T>[] = [];
  private starting = 0;
  private running = 0;
  /** performance.now() of each launch in progress, oldest first. */
  private readonly launches: number[] = [];
  private readonly latency: Record<SlotState, number> = { wait: 0, start: 0, run: 0 };

  constructor(readonly key: string) {}

  /** An idle item now, or undefined. Never waits. */
  tryAcquire(): T | undefined {
    return this.idle.pop();
  }

  /**
   * The most recently released idle item, or the next one released (oldest
   * waiter first). Rejects with `signal`'s reason when it aborts, or with the
   * error of failWaiters().
   *
   * `deadline` is soft: when it aborts, the call gives up with its reason
   * unless a launch is tied to it. The oldest N waiting calls are tied to
   * the N launches in progress (as in Fn: the caller tied to a launch hears
   * its outcome), so a call whose container is being started for it gets
   * that container, or the start's error, rather than "server too busy".
   */
  acquire(signal?: AbortSignal, deadline?: AbortSignal): Promise<T> {
    const item = this.idle.pop();
    if (item !== undefined) return Promise.resolve(item);
    if (signal?.aborted) return Promise.reject(signal.reason);
    return new Promise<T>((resolve, reject) => {
      const drop = (reason: unknown): void => {
        const i = this.waiters.indexOf(waiter);
        if (i >= 0) this.waiters.splice(i, 1);
        waiter.detach();
        reject(reason);
      };
      const onAbort = (): void => drop(signal!.reason);
      const onDeadline = (): void => {
        const i = this.waiters.indexOf(waiter);
        if (i >= 0 && i < this.launches.length) waiter.overdue = deadline!.reason;
        else drop(deadline!.reason);
      };
      const waiter: Waiter<T> = {
        since: performance.now(),
        resolve,
        reject,
        detach: () => {
          signal?.removeEventListener('abort', onAbort);
          deadline?.removeEventListener('abort', onDeadline);
        },
      };
      signal?.addEventListener('abort', onAbort, { once: true });
      if (deadline?.aborted) queueMicrotask(onDeadline);
      else deadline?.addEventListener('abort', onDeadline, { once: true });
      this.waiters.push(waiter);
    });
  }

  /** Offers an idle item: to the oldest waiter, else onto the idle stack. */
  release(item: T): void {
    const waiter = this.waiters.shift();
    if (waiter) {
      waiter.detach();
      waiter.resolve(item);
    } else {
      this.idle.push(item);
    }
  }

  /** Takes `item` off the idle stack; false when it is not idle (a call has it). */
  remove(item: T): boolean {
    const i = this.idle.lastIndexOf(item);
    if (i < 0) return false;
    this.idle.splice(i, 1);
    return true;
  }

  /** Rejects every waiting call with `err` (e.g. the function's container cannot start). */
  failWaiters(err: unknown): number {
    const failed = this.waiters.splice(0);
    for (const w of failed) {
      w.detach();
      w.reject(err);
    }
    return failed.length;
  }

  /** Rejects the oldest waiting call only (an error tied to the call that caused it). */
  failOldestWaiter(err: unknown): boolean {
    const w = this.waiters.shift();
    if (!w) return false;
    w.detach();
    w.reject(err);
    return true;
  }

  idleItems(): readonly T[] {
    return this.idle;
  }

  enter(state: 'start' | 'run'): void {
    if (state === 'start') this.starting++;
    else this.running++;
  }

  exit(state: 'start' | 'run', latencyMs?: number): void {
    if (state === 'start') this.starting--;
    else this.running--;
    if (this.starting < 0 || this.running < 0) throw new Error(`slot queue ${this.key}: ${state} count below zero`);
    if (latencyMs !== undefined) this.record(state, latencyMs);
  }

  /**
   * A launch got its resources and starts a container: the oldest waiting
   * call without a launch is now tied to it. Returns the function that ends
   * the launch (call it once, when the container is offered or has failed);
   * overdue calls no longer tied to a launch then give up.
   */
  launch(): () => void {
    const at = performance.now();
    this.launches.push(at);
    let ended = false;
    return () => {
      if (ended) return;
      ended = true;
      this.launches.splice(this.launches.indexOf(at), 1);
      for (let i = this.waiters.length - 1; i >= this.launches.length; i--) {
        const w = this.waiters[i]!;
        if (w.overdue === undefined) continue;
        this.waiters.splice(i, 1);
        w.detach();
        w.reject(w.overdue);
      }
    };
  }

  /**
   * Moving average with smoothing 0.5: recent samples matter most, noise is
   * damped. Every start counts, the first too: a burst on a fresh function
   * must be planned with what starting really costs on this host (image
   * pull included), not with a guess.
   */
  record(state: SlotState, latencyMs: number): void {
    this.latency[state] = this.latency[state] === 0 ? latencyMs : (this.latency[state] + latencyMs) / 2;
  }

  /** Calls waiting: stats().waiting, without building the rest (a check on every call's path). */
  get waitingCount(): number {
    return this.waiters.length;
  }

  /** One state's moving average (ms; 0 until measured): stats().latency[state] without a copy. */
  latencyOf(state: SlotState): number {
    return this.latency[state];
  }

  stats(): SlotStats {
    const now = performance.now();
    return {
      waiting: this.waiters.length,
      starting: this.starting,
      running: this.running,
      idle: this.idle.length,
      oldestWaitMs: this.waiters[0] ? now - this.waiters[0].since : 0,
      launching: this.launches.length,
      oldestLaunchMs: this.launches[0] !== undefined ? now - this.launches[0] : 0,
      latency: { ...this.latency },
    };
  }

  /** Nobody waits, starts, runs or idles here. */
  isEmpty(): boolean {
    return this.waiters.length === 0 && this.starting === 0 && this.running === 0 && this.idle.length === 0;
  }
}

/** Assumed container start time before any has been measured. */
export const DEFAULT_START_MS = 500;

/**
 * Whether the queue should start another container (Fn's
 * isNewContainerNeeded, improved). Fn's rule starts a container whenever
 * waiting calls outnumber containers; for a fast function that is one
 * container per concurrent caller, for a queue that one container drains in
 * a few milliseconds. Here a container is started only when it helps:
 * - calls wait, and fewer containers are starting than calls wait; and
 * - no container serves the queue; or
 * - fewer containers are starting than already serve calls (starts compete
 *   for the same CPUs: a burst grows the fleet by doubling it, as TCP's slow
 *   start does, rather than starting one container per caller at once), and
 *   - the queue will not drain before a new container could be ready: the
 *     waiting calls need `waiting * runLatency / containers`, a start takes
 *     `startLatency`; or
 *   - nothing is starting and the oldest call has already waited longer
 *     than a start takes (the run time is not known yet, or the load grew).
 * A start is estimated from the measured starts (the first included) and is
 * at least as long as the oldest start in progress, so a burst on a slow host
 * does not launch a container per call on a hopeful guess.
 * The agent re-evaluates on every arrival, release and start, and every
 * FN_HOT_POLL_MSECS while calls wait.
 */
export function needsContainer(s: SlotStats): boolean {
  if (s.waiting === 0) return false;
  if (s.starting >= s.waiting) return false;
  const serving = s.running + s.starting + s.idle;
  if (serving === 0) return true;
  if (s.starting >= Math.max(1, s.running + s.idle)) return false;
  // A start in progress has already taken this long: starts cost at least that.
  const start = Math.max(s.latency.start || DEFAULT_START_MS, s.oldestLaunchMs);
  if (s.starting === 0 && s.oldestWaitMs > start) return true;
  if (s.latency.run === 0) return false;
  return (s.waiting * s.latency.run) / serving > start;
}

/** Fn's decision (FNTS_LAUNCH_POLICY=seed), kept for the benchmark's comparison. */
export function seedNeedsContainer(s: SlotStats): boolean {
  if (s.waiting === 0) return false;
  if (s.starting >= s.waiting) return false;
  const executors = s.starting + s.running;
  if (executors < s.waiting) return true;
  const { run, wait, start } = s.latency;
  if (wait === 0) return false;
  return (run / executors) * 2 < wait || run < wait || start < wait;
}

/** A stable hash of everything that makes two containers interchangeable. */
export function slotKey(parts: Record<string, string | number | Readonly<Record<string, string>>>): string {
  const h = createHash('sha1');
  for (const name of Object.keys(parts).sort()) {
    const v = parts[name]!;
    h.update(name).update('\0');
    if (typeof v === 'object') {
      for (const k of Object.keys(v).sort()) h.update(k).update('\0').update(v[k]!).update('\0');
    } else {
      h.update(String(v)).update('\0');
    }
  }
  return h.digest('hex');
}
