/**
 * The outcome of one call as it happens: when it arrived, waited, ran and
 * ended, the container's resource use sampled while it ran (down-sampled the
 * way Fn's drivers.Decimate does), where the time went, and what the container
 * wrote meanwhile. Listeners and the RunningCall's `outcome` get it when the
 * call ends. With nobody reading, nothing is sampled, kept or built: the hot
 * path pays only for what someone reads.
 */
import type { Logger } from 'pino';
import { decimate, type PrepareTimings, type Stat } from '../drivers/index.js';
import { ApiError, callStatus, errorCode, FunctionError, isoTime, tellEach, type Call, type CallOutcome, type CallTimings } from '../models/index.js';
import type { CallListener } from '../call/index.js';
import { CallLog } from './logs.js';
import type { CallSpan, StartTimings } from './spans.js';

export type { StartTimings } from './spans.js';
import type { SpanContext } from '@opentelemetry/api';

export type { CallListener } from '../call/index.js';

/** Starts watching a container's resource use; the returned function stops it. */
export type StatsWatch = (onStat: (stat: Stat) => void, intervalMs: number) => () => void;

/** A container start's span, and when the container became ready (performance.now()). */
export interface StartLink {
  readonly context: SpanContext;
  readonly readyAt: number;
}

/** The driver's prepare timings and the time from run to ready, as an outcome keeps them. */
export function startTimings(prepared: PrepareTimings, startMs: number, tokenMs = 0): StartTimings {
  return { image_ms: Math.round(prepared.imageMs), create_ms: Math.round(prepared.createMs), start_ms: Math.round(startMs), token_ms: tokenMs };
}

/** At most this many stat points are kept per call. */
export const MAX_STAT_POINTS = 240;

/** A failure as its record and its span say it. */
function errorText(error: unknown): string {
  return error instanceof Error ? error.message : String(error);
}

/** The HTTP status a failed call is recorded with. */
export function statusOf(err: unknown): number {
  return err instanceof ApiError ? err.status : 500;
}

export interface TraceOptions {
  readonly listeners: readonly CallListener[];
  readonly log: Logger;
  /** FN_MAX_LOG_SIZE_BYTES: the most of a container's output kept for one call. */
  readonly maxLogBytes: number;
  /** Told once, after the listeners, when the call ends. */
  readonly onEnd: () => void;
  /** The call's open agent_submit span, when tracing is on: its phases are added when the call ends. */
  readonly span?: CallSpan | undefined;
}

export class CallTrace {
  private readonly t0 = performance.now();
  private waitMs = 0;
  private runStart = 0;
  private startedAt: number | undefined;
  private execMs = 0;
  private startTimings: StartTimings | undefined;
  private wasPrewarmed = false;
  private startLink: SpanContext | undefined;
  private readonly samples: Stat[] = [];
  private sampler: NodeJS.Timeout | undefined;
  private unwatch: (() => void) | undefined;
  private ended: { status: number; error: unknown; at: number } | undefined;
  private callLog: CallLog | undefined;
  private wanted = false;
  private result: Promise<CallOutcome> | undefined;
  private resolve: ((o: CallOutcome) => void) | undefined;

  constructor(
    readonly call: Call,
    private readonly o: TraceOptions,
  ) {
    tellEach(o.listeners, (l) => l.onCallStart?.(call), o.log, "a call listener's onCallStart");
  }

  /** Someone reads this call's outcome: its output is kept and its container sampled. */
  private get reading(): boolean {
    return this.wanted || this.o.listeners.length > 0;
  }

  /** The call's outcome, once it ends; never rejects. */
  outcome(): Promise<CallOutcome> {
    this.wanted = true;
    if (!this.result) {
      if (this.ended) this.result = Promise.resolve(this.build());
      else this.result = new Promise((r) => (this.resolve = r));
    }
    return this.result;
  }

  /** Where the container's output goes while it serves this call, when someone reads it. */
  log(): CallLog | undefined {
    if (!this.reading) return undefined;
    if (!this.callLog) {
      const log = new CallLog(this.o.maxLogBytes);
      this.callLog = log;
      for (const resolve of this.pendingLog ?? []) void log.closed.then(resolve);
      this.pendingLog = undefined;
      if (this.o.listeners.some((l) => l.onCallLog)) {
        void log.closed.then((text) => {
          this.logTold = true;
          tellEach(this.o.listeners, (l) => l.onCallLog?.(this.call, text), this.o.log, "a call listener's onCallLog");
        });
      }
    }
    return this.callLog;
  }

  /**
   * The call's log once its container has moved on; '' when the call never
   * reached a container. Never rejects.
   */
  logText(): Promise<string> {
    this.wanted = true;
    if (this.callLog) return this.callLog.closed;
    // Asked before a container took the call: the log is made when it does.
    if (!this.ended) return new Promise((resolve) => (this.pendingLog ??= []).push(resolve));
    return Promise.resolve('');
  }

  private pendingLog: Array<(text: string) => void> | undefined;
  /** Listeners have been told the call's log (onCallLog). */
  private logTold = false;

  /** Milliseconds since arrival, noted as the call's wait. */
  waited(): number {
    this.waitMs = performance.now() - this.t0;
    return this.waitMs;
  }

  /**
   * The function starts working on the call: sampling begins (every
   * `intervalMs`, if anyone reads and the call lasts that long).
   */
  /** The call runs on a container started ahead of demand (its record says `prewarmed`; it is not cold). */
  prewarmed(): void {
    this.wasPrewarmed = true;
  }

  started(timings: StartTimings | undefined, watch: StatsWatch, intervalMs: number, link?: StartLink): void {
    this.startedAt = Date.now();
    // The call waited while its container started: its slot span links to that start.
    if (link && link.readyAt >= this.t0) this.startLink = link.context;
    this.runStart = performance.now();
    if (this.waitMs === 0) this.waitMs = this.runStart - this.t0;
    this.startTimings = timings;
    tellEach(this.o.listeners, (l) => l.onCallExec?.(this.call), this.o.log, "a call listener's onCallExec");
    if (!this.reading || !Number.isFinite(intervalMs)) return;
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

  /** Ends the call once: listeners and the outcome's reader get it. */
  end(status: number, error?: unknown): void {
    if (this.ended) return;
    this.ended = { status, error, at: Date.now() };
    this.executed();
    if (!this.callLog) {
      for (const resolve of this.pendingLog ?? []) resolve('');
      this.pendingLog = undefined;
    }
    try {
      if (this.o.span) this.endSpan(status, error);
      if (this.reading) {
        const outcome = this.build();
        // The log is told once its container moves on: a listener keeping both may wait for it.
        const logFollows = this.callLog !== undefined && !this.logTold && this.o.listeners.some((l) => l.onCallLog);
        tellEach(this.o.listeners, (l) => l.onCallEnd?.(this.call, outcome, logFollows), this.o.log, "a call listener's onCallEnd");
        this.resolve?.(outcome);
      }
    } finally {
      this.o.onEnd();
    }
  }

  private endSpan(status: number, error: unknown): void {
    const origin = performance.timeOrigin;
    const arrived = origin + this.t0;
    const start = this.startTimings;
    this.o.span!.end({
      arrived,
      waitEnd: arrived + this.waitMs,
      execStart: this.runStart > 0 ? origin + this.runStart : undefined,
      execEnd: this.runStart > 0 && this.execMs > 0 ? origin + this.runStart + this.execMs : undefined,
      // The phases' clock, so that children end within their parent.
      ended: Math.max(origin + performance.now(), this.runStart > 0 ? origin + this.runStart + this.execMs : 0),
      startMs: start ? start.image_ms + start.create_ms + start.start_ms : undefined,
      tokenMs: start?.token_ms ?? 0,
      cold: this.call.fn.format === 'default',
      status,
      error: error === undefined ? undefined : errorText(error),
      startLink: this.startLink,
    });
  }

  private build(): CallOutcome {
    // Built once per call when records are kept: plain assignments, no spreads.
    const { status, error, at } = this.ended!;
    const start = this.startTimings;
    const timings: CallTimings = start
      ? { wait_ms: Math.round(this.waitMs), exec_ms: Math.round(this.execMs), image_ms: start.image_ms, create_ms: start.create_ms, start_ms: start.start_ms }
      : this.wasPrewarmed
        ? { wait_ms: Math.round(this.waitMs), exec_ms: Math.round(this.execMs), prewarmed: true }
        : { wait_ms: Math.round(this.waitMs), exec_ms: Math.round(this.execMs) };
    const outcome: { -readonly [K in keyof CallOutcome]: CallOutcome[K] } = {
      id: this.call.id,
      status: callStatus(status),
      httpStatus: status,
      errorUser: error instanceof FunctionError,
      ran: this.startedAt !== undefined,
      createdAt: isoTime(this.call.createdAt),
      completedAt: isoTime(at),
      timings,
      stats: this.samples.length === 0 ? [] : decimate(MAX_STAT_POINTS, this.samples).map((s) => ({ timestamp: new Date(s.timestamp).toISOString(), metrics: s.metrics })),
    };
    if (error !== undefined) {
      outcome.error = errorText(error);
      outcome.code = errorCode(error);
    }
    if (this.startedAt !== undefined) outcome.startedAt = isoTime(this.startedAt);
    return outcome;
  }
}
