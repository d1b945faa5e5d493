/**
 * The agent's side of the keep-alive policy (keepalive.ts): tells it when
 * each fn's calls start and end, asks it how long a container that has
 * just become idle stays, and keeps at most one pre-warm timer per fn.
 *
 *   call ends ─▶ idle(spec): keep for keepMs (0: release now)
 *                └─ prewarmInMs? ─▶ timer (less a start's time) ─▶ host.prewarm(spec, keepMs)
 *   call starts ─▶ the fn's timer is cleared (the call came first)
 *
 * A pre-warm that cannot happen (no free memory, the image gone, the agent
 * closing) is the host's to swallow: it never fails a call.
 */
import type { Logger } from 'pino';
import type { Clock, Timer } from './clock.js';
import type { KeepAlivePolicy } from './keepalive.js';
import type { FunctionSpec } from './spec.js';

export interface KeeperHost {
  readonly clock: Clock;
  readonly log: Logger;
  /**
   * Starts one container of `spec` ahead of demand, idle for at most
   * `keepMs` once ready, unless the fn has a container already. Resolves
   * when done or given up; never rejects.
   */
  prewarm(spec: FunctionSpec, keepMs: number): Promise<void>;
}

export class Keeper {
  /** Per fn: its pending pre-warm, and the spec it would start. */
  private readonly timers = new Map<string, { timer: Timer; spec: FunctionSpec }>();
  private closed = false;

  constructor(
    readonly policy: KeepAlivePolicy,
    private readonly host: KeeperHost,
  ) {}

  callStarted(spec: FunctionSpec): void {
    this.cancel(spec.fnId);
    this.policy.callStarted(spec.fnId, this.host.clock.now());
  }

  callEnded(spec: FunctionSpec): void {
    this.policy.callEnded(spec.fnId, this.host.clock.now());
  }

  /**
   * A container of `spec` has just become idle with no call waiting: how
   * long (ms) it stays, at most the fn's idle_timeout; 0: it goes now. May
   * set the fn's pre-warm timer, `startMs` (how long the fn's containers
   * take to start, as measured) ahead of when the policy wants one ready.
   */
  idle(spec: FunctionSpec, startMs: number): number {
    const d = this.policy.decide(spec.fnId, spec.idleTimeoutMs, this.host.clock.now());
    if (d.prewarmInMs !== undefined && d.prewarmKeepMs > 0 && !this.closed) {
      this.cancel(spec.fnId);
      const keepMs = Math.min(d.prewarmKeepMs, spec.idleTimeoutMs);
      const timer = this.host.clock.setTimeout(
        () => {
          this.timers.delete(spec.fnId);
          this.host.log.debug({ fn: spec.fnId, keepMs, basis: d.basis }, 'pre-warming a container');
          void this.host.prewarm(spec, keepMs);
        },
        Math.max(0, d.prewarmInMs - startMs),
      );
      this.timers.set(spec.fnId, { timer, spec });
    }
    return Math.max(0, Math.min(d.keepMs, spec.idleTimeoutMs));
  }

  private cancel(fnId: string): void {
    const t = this.timers.get(fnId);
    if (!t) return;
    t.timer.clear();
    this.timers.delete(fnId);
  }

  /** The fns `matches` picks changed or were deleted: their pending pre-warms (of the old definition) are dropped. */
  changed(matches: (spec: FunctionSpec) => boolean): void {
    for (const [fnId, t] of [...this.timers]) if (matches(t.spec)) this.cancel(fnId);
  }

  /** Pending pre-warms (for tests). */
  get pending(): number {
    return this.timers.size;
  }

  /** No more pre-warms: pending ones are dropped. Idempotent. */
  close(): void {
    this.closed = true;
    for (const t of this.timers.values()) t.timer.clear();
    this.timers.clear();
  }
}
