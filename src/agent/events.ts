/**
 * Container lifecycle events, for metrics: the states Fn counts (wait for
 * resources, start, idle, paused, busy; and `prewarmed`: started ahead of
 * demand, idle until a call takes it), why a container left service, and
 * whether a pre-warmed container was used or wasted.
 *
 * Same rules as call listeners (trace.ts): called synchronously, cheap, and
 * never throwing; one that throws is logged and skipped.
 */
import type { Logger } from 'pino';
import { tellEach } from '../models/index.js';

/**
 * Why a container left service: `idle` (its idle timeout passed),
 * `timed-out` (a call overran its deadline), `changed` (its fn changed or
 * was deleted), `evicted` (another fn needed its memory), `failed` (it did
 * not start, exited, broke an exchange or wrote what nobody asked for),
 * `shutdown` (the server stops).
 */
export type RetireReason = 'idle' | 'timed-out' | 'changed' | 'evicted' | 'failed' | 'shutdown';

export type ContainerState = 'wait' | 'start' | 'idle' | 'paused' | 'busy' | 'prewarmed';

/** A pre-warmed container served a call (`used`) or left service without one (`wasted`). */
export type PrewarmResult = 'used' | 'wasted';

/** Which container, and whose. */
export interface ContainerRef {
  readonly id: string;
  readonly appId: string;
  readonly fnId: string;
}

export interface ContainerListener {
  /**
   * A container moved from `from` (undefined: it is new) to `to`
   * (undefined: it is gone) after `ms` in `from`. A launch waiting for
   * memory and CPU is a container in state `wait`.
   */
  onContainerState?(c: ContainerRef, from: ContainerState | undefined, to: ContainerState | undefined, ms: number): void;
  /** A container that started left service, for this reason. */
  onContainerRetired?(c: ContainerRef, reason: RetireReason): void;
  /** A pre-warmed container was used by a call, or left service unused. */
  onPrewarm?(c: ContainerRef, result: PrewarmResult): void;
}

/** One container's walk through its states, told to the listeners. */
export class ContainerStates {
  private state: ContainerState | undefined;
  private since = performance.now();
  private done = false;

  constructor(
    readonly ref: ContainerRef,
    private readonly listeners: readonly ContainerListener[],
    private readonly log: Logger,
  ) {}

  get current(): ContainerState | undefined {
    return this.state;
  }

  /** Moves to `next` (nothing happens when it is already there, or gone). */
  to(next: ContainerState): void {
    if (this.done || next === this.state) return;
    this.move(next);
  }

  /** The container is gone; `reason` when it had started and was retired. Idempotent. */
  end(reason?: RetireReason): void {
    if (this.done) return;
    this.move(undefined);
    this.done = true;
    if (reason === undefined) return;
    tellEach(this.listeners, (l) => l.onContainerRetired?.(this.ref, reason), this.log, "a container listener's onContainerRetired");
  }

  /** Its pre-warm was used, or wasted. */
  prewarm(result: PrewarmResult): void {
    tellEach(this.listeners, (l) => l.onPrewarm?.(this.ref, result), this.log, "a container listener's onPrewarm");
  }

  private move(next: ContainerState | undefined): void {
    const now = performance.now();
    const from = this.state;
    const ms = now - this.since;
    this.state = next;
    this.since = now;
    tellEach(this.listeners, (l) => l.onContainerState?.(this.ref, from, next, ms), this.log, "a container listener's onContainerState");
  }
}
