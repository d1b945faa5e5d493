/**
 * The evictor: when a container launch waits for memory or CPU, idle
 * containers of other functions make room (Fn's api/agent/evictor.go).
 *
 * It frees enough for the longest-waiting request in one pass: the least
 * recently used containers idle at least FN_EJECT_IDLE_MSECS, until what
 * they hold covers the shortfall. A container whose own queue is waiting
 * to launch is spared (evicting it would only make that queue wait). When
 * nothing is eligible yet, it looks again when the next container becomes
 * eligible.
 */
import type { Logger } from 'pino';
import type { Clock, Timer } from './clock.js';
import type { HotContainer } from './hot.js';
import { MB, type ResourceRequest, type ResourceTracker } from './resource.js';

/** How much longer than FN_EJECT_IDLE_MSECS a container must be idle to make room for a refused call. */
const REFUSED_IDLE_FACTOR = 5;

export interface EvictorOptions {
  readonly resources: ResourceTracker;
  readonly clock: Clock;
  /** FN_EJECT_IDLE_MSECS: how long a container must have been idle to be evicted. */
  readonly ejectIdleMs: number;
  readonly log: Logger;
  /** The idle containers that may be evicted now: not waiting to launch in their own queue. */
  candidates(): Iterable<HotContainer>;
  /** Takes `c` out of its queue; false when it was not idle there any more. */
  take(c: HotContainer): boolean;
}

export class Evictor {
  private timer: Timer | undefined;
  private running = false;
  private stopped = false;
  private readonly unsubscribe: () => void;

  constructor(private readonly o: EvictorOptions) {
    this.unsubscribe = o.resources.onWaiter(() => this.schedule(0));
  }

  /** Looks again after `delayMs` of the clock's time; at once (next turn of the event loop) for 0. */
  private schedule(delayMs: number): void {
    if (this.timer || this.stopped) return;
    const run = (): void => {
      this.timer = undefined;
      this.evict().catch((err: unknown) => this.o.log.error({ err }, 'eviction failed'));
    };
    if (delayMs > 0) {
      this.timer = this.o.clock.setTimeout(run, delayMs);
      return;
    }
    const soon = setImmediate(run);
    this.timer = { clear: () => clearImmediate(soon) };
  }

  /**
   * Evicts enough idle containers for the longest-waiting request (or, with
   * the non-blocking tracker, where nobody waits, for `req`, refused a moment
   * ago: the next call of its fn finds room), then looks again while
   * requests wait. For a refused `req` only containers idle for
   * REFUSED_IDLE_FACTOR times FN_EJECT_IDLE_MSECS go: a refusal sends the
   * call to another runner, and evicting at the first refusal makes runners
   * that are merely busy churn containers (measured: bench/fleet.mts). An
   * `eager` request (a call an LB says has waited: the runner is its first
   * choice) takes containers idle FN_EJECT_IDLE_MSECS, as a waiting launch does.
   */
  async evict(req?: ResourceRequest, eager = false): Promise<void> {
    if (this.running || this.stopped) return;
    const need = this.o.resources.shortfall(req);
    if (!need || (req && need.memoryBytes <= 0 && need.cpuMillis <= 0)) return;
    this.running = true;
    try {
      const now = this.o.clock.now();
      const ejectIdleMs = req && !eager ? this.o.ejectIdleMs * REFUSED_IDLE_FACTOR : this.o.ejectIdleMs;
      let soonest = Infinity;
      let memory = 0;
      let cpu = 0;
      const doomed: HotContainer[] = [];
      for (const c of this.leastRecentlyUsed()) {
        if (memory >= need.memoryBytes && cpu >= need.cpuMillis) break;
        const eligibleAt = c.idleSince + ejectIdleMs;
        if (eligibleAt > now) {
          soonest = Math.min(soonest, eligibleAt);
          continue;
        }
        if (!this.o.take(c)) continue;
        doomed.push(c);
        memory += c.spec.memoryMB * MB;
        cpu += c.spec.cpuMillis;
      }
      if (doomed.length > 0) {
        this.o.log.info({ containers: doomed.map((c) => ({ fn: c.spec.fnId, container: c.id })) }, 'evicting idle containers: another function waits for memory');
        // Each frees its memory when it is gone, which grants the waiting request.
        await Promise.all(doomed.map((c) => c.retire('evicted', 'evicted for another function')));
      }
      if (this.o.resources.waiterCount > 0) {
        const next = doomed.length > 0 ? 0 : Number.isFinite(soonest) ? Math.max(0, soonest - this.o.clock.now()) : ejectIdleMs;
        this.schedule(next);
      }
    } finally {
      this.running = false;
    }
  }

  /**
   * How long (ms) until an eager eviction (see evict) could free room for
   * `req`: 0 when there is room or it could be made now; undefined when the
   * idle containers of other fns would not free enough (room then waits on
   * busy containers, which nobody can time).
   */
  roomIn(req: ResourceRequest): number | undefined {
    const need = this.o.resources.shortfall(req);
    if (!need || (need.memoryBytes <= 0 && need.cpuMillis <= 0)) return 0;
    const now = this.o.clock.now();
    let memory = 0;
    let cpu = 0;
    for (const c of this.leastRecentlyUsed()) {
      memory += c.spec.memoryMB * MB;
      cpu += c.spec.cpuMillis;
      // The least recently used go first: room is there once this one is eligible.
      if (memory >= need.memoryBytes && cpu >= need.cpuMillis) return Math.max(0, c.idleSince + this.o.ejectIdleMs - now);
    }
    return undefined;
  }

  /**
   * The idle containers that may be evicted in the order they go:
   * pre-warmed ones first (a guess, where the others served calls), then
   * idle longest first.
   */
  private leastRecentlyUsed(): HotContainer[] {
    return [...this.o.candidates()].sort((a, b) => Number(b.isPrewarmed) - Number(a.isPrewarmed) || a.idleSince - b.idleSince);
  }

  close(): void {
    this.stopped = true;
    this.timer?.clear();
    this.timer = undefined;
    this.unsubscribe();
  }
}
