/**
 * OpenTelemetry spans of a call, named after Fn's agent's: one
 * `agent_submit` span per call, started when the call reaches the agent and
 * continuing the caller's W3C `traceparent` (the function gets the call's own
 * traceparent in its place), and, when the call ends, its phases as child
 * spans: `agent_get_slot` (the wait for a container), within it
 * `agent_wait_hot` (a container already there) or `agent_launch_cold` (the
 * container start the call waited for, and in it `agent_get_resource_token`),
 * then `agent_hot_exec` or `agent_cold_exec`.
 *
 * A container's start is a span of its own (`container_start`): every call
 * that waited while it started links its `agent_get_slot` to it.
 *
 * What the call path pays for: parsing the caller's traceparent, two ids, the
 * sampler's decision and, when the call ends, one flat record of its times.
 * The spans themselves are made from those records, and exported, elsewhere
 * (a SpanRecorder: telemetry/span-export.ts does it on a thread of its own).
 * With tracing off the agent has no CallSpans at all.
 */
import { randomFillSync } from 'node:crypto';
import { ROOT_CONTEXT, trace, TraceFlags, type Context, type SpanContext, type TextMapGetter } from '@opentelemetry/api';
import { W3CTraceContextPropagator } from '@opentelemetry/core';
import type { Call } from '../models/index.js';
import { sameName, withoutHeaders, type RawHeaders } from './protocol/call.js';

/** Timings of the container start a call waited for. */
export interface StartTimings {
  readonly image_ms: number;
  readonly create_ms: number;
  readonly start_ms: number;
  /** How long the start waited for memory and CPU first (traces only; not part of the record). */
  readonly token_ms?: number;
}

/** Reads a header out of raw [name, value, ...] pairs. */
const rawGetter: TextMapGetter<RawHeaders> = {
  keys: (raw) => raw.filter((_, i) => i % 2 === 0),
  get: (raw, key) => {
    for (let i = 0; i + 1 < raw.length; i += 2) if (sameName(raw[i]!, key)) return raw[i + 1];
    return undefined;
  },
};

/** What a call's spans need of it when it ends. */
export interface CallPhases {
  /** Epoch ms: arrival, end of the wait, start and end of execution. */
  readonly arrived: number;
  readonly waitEnd: number;
  readonly execStart: number | undefined;
  readonly execEnd: number | undefined;
  readonly ended: number;
  /** The container start the call waited for, in ms, if it waited for one. */
  readonly startMs: number | undefined;
  /** How long that start waited for memory and CPU first, in ms. */
  readonly tokenMs: number;
  readonly cold: boolean;
  readonly status: number;
  readonly error: string | undefined;
  /** The start of the container the call waited for (its own span), when traced. */
  readonly startLink?: SpanContext | undefined;
}

/**
 * A sampled call's spans as one flat record (cheap to keep and to hand to
 * another thread): ids, the call's ids and its phases. Times are epoch ms;
 * NaN where the call had no such phase.
 */
export interface CallSpanRecord {
  readonly kind: 'call';
  readonly traceId: string;
  readonly spanId: string;
  /** The caller's span ('' for none) and its tracestate ('' for none). */
  readonly parentSpanId: string;
  readonly traceState: string;
  readonly callId: string;
  readonly appId: string;
  readonly fnId: string;
  /** agent_submit's start: when the call was made (at or before its arrival). */
  readonly begun: number;
  readonly arrived: number;
  readonly waitEnd: number;
  readonly execStart: number;
  readonly execEnd: number;
  readonly ended: number;
  readonly startMs: number;
  readonly tokenMs: number;
  readonly cold: boolean;
  readonly status: number;
  /** '' for none. */
  readonly error: string;
  /** The container start the call waited for ('' for none). */
  readonly linkTraceId: string;
  readonly linkSpanId: string;
}

/** A container start's span as a flat record; times epoch ms. */
export interface StartSpanRecord {
  readonly kind: 'start';
  readonly traceId: string;
  readonly spanId: string;
  readonly appId: string;
  readonly fnId: string;
  readonly containerId: string;
  readonly begun: number;
  readonly ready: number;
  readonly tokenMs: number;
  readonly imageMs: number;
  readonly createMs: number;
  readonly startMs: number;
}

export type SpanRecord = CallSpanRecord | StartSpanRecord;

/** Where sampled spans go: the tracing pipeline (telemetry/tracing.ts). */
export interface SpanRecorder {
  /** The sampler's decision for a span `name` of `traceId`, whose parent (if any) is in `parent`. */
  sampled(parent: Context, traceId: string, name: string): boolean;
  /** Takes a sampled span's record; never blocks, never throws. */
  record(r: SpanRecord): void;
}

/** One call's open `agent_submit` span. */
export interface CallSpan {
  /** The call as the function gets it: its traceparent is this span's. */
  readonly call: Call;
  end(phases: CallPhases): void;
}

/** W3C Trace Context, used directly rather than through a process-wide registration. */
const w3c = new W3CTraceContextPropagator();

/** Random ids, as hex, from a pool of random bytes refilled a few KiB at a time. */
const idPool = Buffer.allocUnsafe(4096);
let idAt = idPool.length;

function randomId(bytes: 8 | 16): string {
  for (;;) {
    if (idAt + bytes > idPool.length) {
      randomFillSync(idPool);
      idAt = 0;
    }
    const id = idPool.toString('hex', idAt, idAt + bytes);
    idAt += bytes;
    // All zeros is W3C's "invalid"; a new draw is cheaper than a check for it elsewhere.
    if (!/^0+$/.test(id)) return id;
  }
}

export class CallSpans {
  constructor(private readonly recorder: SpanRecorder) {}

  /** Opens `agent_submit` for `call`, a child of the caller's traceparent if it sent one. */
  begin(call: Call): CallSpan {
    const parentCtx = w3c.extract(ROOT_CONTEXT, call.headers, rawGetter);
    const parent = trace.getSpanContext(parentCtx);
    const traceId = parent?.traceId ?? randomId(16);
    const spanId = randomId(8);
    const sampled = this.recorder.sampled(parentCtx, traceId, 'agent_submit');
    const traceState = parent?.traceState?.serialize() ?? '';
    const headers = withoutHeaders(call.headers, ['traceparent', 'tracestate']);
    headers.push('traceparent', `00-${traceId}-${spanId}-${sampled ? '01' : '00'}`);
    if (traceState !== '') headers.push('tracestate', traceState);
    const traced = { ...call, headers };
    if (!sampled) return { call: traced, end: () => undefined };
    const ids = { traceId, spanId, parentSpanId: parent?.spanId ?? '', traceState };
    return { call: traced, end: (phases) => this.recorder.record(callRecord(ids, call, phases)) };
  }

  /**
   * A container's start as a span of its own (`container_start`, a root:
   * several calls may wait for one start), from the time it asked for
   * memory until its function was ready. Each call that waited meanwhile
   * links its `agent_get_slot` to it. Undefined when not sampled.
   */
  containerStart(ref: { readonly id: string; readonly appId: string; readonly fnId: string }, t: StartTimings, readyEpochMs: number): SpanContext | undefined {
    const traceId = randomId(16);
    if (!this.recorder.sampled(ROOT_CONTEXT, traceId, 'container_start')) return undefined;
    const spanId = randomId(8);
    const tokenMs = t.token_ms ?? 0;
    this.recorder.record({
      kind: 'start',
      traceId,
      spanId,
      appId: ref.appId,
      fnId: ref.fnId,
      containerId: ref.id,
      begun: readyEpochMs - t.start_ms - t.create_ms - t.image_ms - tokenMs,
      ready: readyEpochMs,
      tokenMs,
      imageMs: t.image_ms,
      createMs: t.create_ms,
      startMs: t.start_ms,
    });
    return { traceId, spanId, traceFlags: TraceFlags.SAMPLED };
  }
}

function callRecord(ids: { traceId: string; spanId: string; parentSpanId: string; traceState: string }, call: Call, p: CallPhases): CallSpanRecord {
  return {
    kind: 'call',
    traceId: ids.traceId,
    spanId: ids.spanId,
    parentSpanId: ids.parentSpanId,
    traceState: ids.traceState,
    callId: call.id,
    appId: call.fn.appId,
    fnId: call.fn.fnId,
    begun: Math.min(call.createdAt, p.arrived),
    arrived: p.arrived,
    waitEnd: p.waitEnd,
    execStart: p.execStart ?? NaN,
    execEnd: p.execEnd ?? NaN,
    ended: p.ended,
    startMs: p.startMs ?? NaN,
    tokenMs: p.tokenMs,
    cold: p.cold,
    status: p.status,
    error: p.error ?? '',
    linkTraceId: p.startLink?.traceId ?? '',
    linkSpanId: p.startLink?.spanId ?? '',
  };
}
