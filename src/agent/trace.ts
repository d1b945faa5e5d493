/**
 * The record of one call as it happens: when it arrived, waited, ran and
 * ended, the container's resource use sampled while it ran (down-sampled the
 * way seed 004's Decimate does), and where the time went. Listeners get it
 * when the call ends. With no listener nothing is sampled or built: the hot
 * path pays only for what someone reads.
 */
import { decimate, type PrepareTimings, type Stat } from '../drivers/index.js';
import { callStatus, type CallRecord, type CallTimings } from '../models/index.js';
import type { FunctionSpec } from './call.js';
import type { CallRequest } from './protocol/call.js';
import type { Logger } from 'pino';

export interface CallInfo {
  readonly id: string;
  readonly spec: FunctionSpec;
}

export interface CallOutcome {
  readonly status: number;
  readonly error?: unknown;
  readonly durationMs: number;
  readonly record: CallRecord;
}

/**
 * Hooks around every call, for call records and metrics.
 *
 * Rules: a listener is called synchronously on the call's path, so it must
 * be cheap and must not block (hand slow work, like storing a record, to a
 * queue of its own). It must not throw: one that does is logged and
 * skipped, and the call, the other listeners and shutdown go on as if it
 * had returned.
 */
export interface CallListener {
  onCallStart?(call: CallInfo): void;
  onCallEnd?(call: CallInfo, outcome: CallOutcome): void;
}

/** Calls `fn`, logging rather than passing on what it throws (the listener rules above). */
function guarded(log: Logger, what: string, fn: () => void): void {
  try {
    fn();
  } catch (err) {
    log.error({ err }, `a call listener's ${what} threw; it is skipped (listeners must not throw)`);
  }
}

/** Starts watching a container's resource use; the returned function stops it. */
export type StatsWatch = (onStat: (stat: Stat) => void, intervalMs: number) => () => void;

/** Timings of the container start a call waited for. */
export interface StartTimings {
  readonly image_ms: number;
  readonly create_ms: number;
  readonly start_ms: number;
}

/** The driver's prepare timings and the time from run to ready, as a call record keeps them. */
export function startTimings(prepared: PrepareTimings, startMs: number): StartTimings {
  return { image_ms: Math.round(prepared.imageMs), create_ms: Math.round(prepared.createMs), start_ms: Math.round(startMs) };
}

/** At most this many stat points are kept per call. */
export const MAX_STAT_POINTS = 240;

export class CallTrace {
  private readonly createdAt = Date.now();
  private readonly t0 = performance.now();
  private waitMs = 0;
  private runStart = 0;
  private startedAt: number | undefined;
  private execMs = 0;
  private startTimings: StartTimings | undefined;
  private readonly samples: Stat[] = [];
  private sampler: NodeJS.Timeout | undefined;
  private unwatch: (() => void) | undefined;
  private ended = false;

  constructor(
    private readonly call: CallInfo,
    private readonly req: CallRequest,
    private readonly listeners: readonly CallListener[],
    private readonly log: Logger,
    private readonly onEnd: () => void,
  ) {
    for (const l of listeners) if (l.onCallStart) guarded(log, 'onCallStart', () => l.onCallStart!(call));
  }

  /** Milliseconds since arrival, noted as the call's wait. */
  waited(): number {
    this.waitMs = performance.now() - this.t0;
    return this.waitMs;
  }

  /**
   * The function starts working on the call: sampling begins (every
   * `intervalMs`, if anyone listens and the call lasts that long).
   */
  started(timings: StartTimings | undefined, watch: StatsWatch, intervalMs: number): void {
    this.startedAt = Date.now();
    this.runStart = performance.now();
    if (this.waitMs === 0) this.waitMs = this.runStart - this.t0;
    this.startTimings = timings;
    if (this.listeners.length === 0 || !Number.isFinite(intervalMs)) return;
    // Short calls never touch the engine: watching starts once the call has
    // run for an interval.
    this.sampler = setTimeout(() => {
      this.sampler = undefined;
      if (this.execMs === 0 && !this.ended) this.unwatch = watch((s) => this.samples.push(s), intervalMs);
    }, intervalMs);
    this.sampler.unref();
  }

  /** The function is done with the call (answer read, or the call failed). */
  executed(): void {
    if (this.runStart > 0 && this.execMs === 0) this.execMs = performance.now() - this.runStart;
    clearTimeout(this.sampler);
    this.sampler = undefined;
    this.unwatch?.();
    this.unwatch = undefined;
  }

  /** Ends the call once: listeners get its record. */
  end(status: number, error?: unknown): void {
    if (this.ended) return;
    this.ended = true;
    this.executed();
    try {
      if (this.listeners.length > 0) {
        const outcome: CallOutcome = { status, error, durationMs: performance.now() - this.t0, record: this.record(status, error) };
        for (const l of this.listeners) if (l.onCallEnd) guarded(this.log, 'onCallEnd', () => l.onCallEnd!(this.call, outcome));
      }
    } finally {
      this.onEnd();
    }
  }

  private record(status: number, error: unknown): CallRecord {
    const { spec } = this.call;
    const timings: CallTimings = {
      wait_ms: Math.round(this.waitMs),
      exec_ms: Math.round(this.execMs),
      ...(this.startTimings ?? {}),
    };
    let path = '/';
    try {
      path = new URL(this.req.url).pathname;
    } catch {
      // keep '/'
    }
    return {
      id: this.call.id,
      status: callStatus(status),
      ...(error !== undefined ? { error: error instanceof Error ? error.message : String(error) } : {}),
      app_id: spec.appId,
      app_name: spec.appName,
      fn_id: spec.fnId,
      path,
      created_at: new Date(this.createdAt).toISOString(),
      ...(this.startedAt !== undefined ? { started_at: new Date(this.startedAt).toISOString() } : {}),
      completed_at: new Date().toISOString(),
      stats: decimate(MAX_STAT_POINTS, this.samples).map((s) => ({ timestamp: new Date(s.timestamp).toISOString(), metrics: s.metrics })),
      timings,
    };
  }
}
