/**
 * Slot queues (seed 001). One queue per set of interchangeable hot
 * containers (same app, fn, image, resources, timeouts and config); the key is
 * a hash of all of that. A queue holds the idle containers and the calls
 * waiting for one:
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
  readonly starting: number;
  readonly running: number;
  readonly idle: number;
  /** How long the oldest waiting call has waited, ms (0 when none waits). */
  readonly oldestWaitMs: number;
  /** Exponentially weighted moving averages, ms; 0 until measured. */
  readonly latency: Readonly<Record<SlotState, number>>;
}

interface Waiter<T> {
  readonly since: number;
  readonly resolve: (item: T) => void;
  readonly reject: (err: unknown) => void;
  readonly detach: () => void;
}

export class SlotQueue<T> {
  private readonly idle: T[] = [];
  private readonly waiters: Waiter<T>[] = [];
  private starting = 0;
  private running = 0;
  private readonly latency: Record<SlotState, number> = { wait: 0, start: 0, run: 0 };
  private readonly samples: Record<SlotState, number> = { wait: 0, start: 0, run: 0 };

  constructor(readonly key: string) {}

  /** An idle item now, or undefined. Never waits. */
  tryAcquire(): T | undefined {
    return this.idle.pop();
  }

  /**
   * The most recently released idle item, or the next one released. Rejects
   * with the signal's reason if it aborts first, or with the error of
   * failWaiters().
   */
  acquire(signal?: AbortSignal): Promise<T> {
    const item = this.idle.pop();
    if (item !== undefined) return Promise.resolve(item);
    if (signal?.aborted) return Promise.reject(signal.reason);
    return new Promise<T>((resolve, reject) => {
      const onAbort = (): void => {
        const i = this.waiters.indexOf(waiter);
        if (i >= 0) this.waiters.splice(i, 1);
        reject(signal!.reason);
      };
      const waiter: Waiter<T> = { since: performance.now(), resolve, reject, detach: () => signal?.removeEventListener('abort', onAbort) };
      signal?.addEventListener('abort', onAbort, { once: true });
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
   * Moving average with smoothing 0.5: recent samples matter most, noise is
   * damped. The first start is not counted (it often includes an image pull).
   */
  record(state: SlotState, latencyMs: number): void {
    const n = this.samples[state]++;
    if (state === 'start' && n === 0) return;
    this.latency[state] = this.latency[state] === 0 ? latencyMs : (this.latency[state] + latencyMs) / 2;
  }

  stats(): SlotStats {
    return {
      waiting: this.waiters.length,
      starting: this.starting,
      running: this.running,
      idle: this.idle.length,
      oldestWaitMs: this.waiters[0] ? performance.now() - this.waiters[0].since : 0,
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
 * Whether the queue should start another container (seed 001's
 * isNewContainerNeeded, improved). The seed starts a container whenever
 * waiting calls outnumber containers; for a fast function that is one
 * container per concurrent caller, for a queue that one container drains in
 * a few milliseconds. Here a container is started only when it helps:
 * - calls wait, and fewer containers are starting than calls wait; and
 * - no container serves the queue; or
 * - the queue will not drain before a new container could be ready: the
 *   waiting calls need `waiting * runLatency / containers`, a start takes
 *   `startLatency`; or
 * - nothing is starting and the oldest call has already waited longer than
 *   a start takes (the run time is not known yet, or the load just grew).
 * The agent re-evaluates on every arrival, release and start, and every
 * FN_HOT_POLL_MSECS while calls wait.
 */
export function needsContainer(s: SlotStats): boolean {
  if (s.waiting === 0) return false;
  if (s.starting >= s.waiting) return false;
  const serving = s.running + s.starting + s.idle;
  if (serving === 0) return true;
  const start = s.latency.start || DEFAULT_START_MS;
  if (s.starting === 0 && s.oldestWaitMs > start) return true;
  if (s.latency.run === 0) return false;
  return (s.waiting * s.latency.run) / serving > start;
}

/** The seed's decision, kept for the benchmark's comparison. */
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

/** The queues of one agent, created on first use and dropped when empty. */
export class SlotQueues<T> {
  private readonly queues = new Map<string, SlotQueue<T>>();

  get(key: string): SlotQueue<T> {
    let q = this.queues.get(key);
    if (!q) {
      q = new SlotQueue<T>(key);
      this.queues.set(key, q);
    }
    return q;
  }

  peek(key: string): SlotQueue<T> | undefined {
    return this.queues.get(key);
  }

  /** Drops the queue if nothing is left in it; true when dropped. */
  dropIfEmpty(q: SlotQueue<T>): boolean {
    if (!q.isEmpty() || this.queues.get(q.key) !== q) return false;
    this.queues.delete(q.key);
    return true;
  }

  all(): SlotQueue<T>[] {
    return [...this.queues.values()];
  }
}
