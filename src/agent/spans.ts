/**
 * OpenTelemetry spans of a call, named after the seed agent's: one
 * `agent_submit` span per call, started when the call reaches the agent and
 * continuing the caller's W3C `traceparent` (the function gets the call's own
 * traceparent in its place), and, when the call ends, its phases as child
 * spans with the times CallTrace noted: `agent_get_slot` (the wait for a
 * container), within it `agent_wait_hot` (a container already there) or
 * `agent_launch_cold` (the container start the call waited for), then
 * `agent_hot_exec` or `agent_cold_exec`.
 *
 * A container's start is a span of its own (`container_start`): every call
 * that waited while it started links its `agent_get_slot` to it.
 *
 * Phases are written after the fact, from timestamps: the call path pays for
 * one span, not six. With tracing off the agent has no CallSpans at all.
 */
import { ROOT_CONTEXT, SpanStatusCode, trace, TraceFlags, type Attributes, type Context, type Span, type SpanContext, type TextMapGetter, type TextMapSetter, type Tracer } from '@opentelemetry/api';
import type { StartTimings } from './trace.js';
import { W3CTraceContextPropagator } from '@opentelemetry/core';
import type { Call } from '../models/index.js';
import { sameName, withoutHeaders, type RawHeaders } from './protocol/call.js';

/** Reads a header out of raw [name, value, ...] pairs. */
const rawGetter: TextMapGetter<RawHeaders> = {
  keys: (raw) => raw.filter((_, i) => i % 2 === 0),
  get: (raw, key) => {
    for (let i = 0; i + 1 < raw.length; i += 2) if (sameName(raw[i]!, key)) return raw[i + 1];
    return undefined;
  },
};

const recordSetter: TextMapSetter<Record<string, string>> = {
  set: (carrier, key, value) => void (carrier[key] = value),
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

/** One call's open `agent_submit` span. */
export interface CallSpan {
  /** The call as the function gets it: its traceparent is this span's. */
  readonly call: Call;
  end(phases: CallPhases): void;
}

/** W3C Trace Context, used directly rather than through a process-wide registration. */
const w3c = new W3CTraceContextPropagator();

export class CallSpans {
  constructor(private readonly tracer: Tracer) {}

  /** Opens `agent_submit` for `call`, a child of the caller's traceparent if it sent one. */
  begin(call: Call): CallSpan {
    const parent = w3c.extract(ROOT_CONTEXT, call.headers, rawGetter);
    const attributes: Attributes = { 'fn.call_id': call.id, 'fn.app_id': call.fn.appId, 'fn.fn_id': call.fn.fnId };
    const span = this.tracer.startSpan('agent_submit', { attributes, startTime: call.createdAt }, parent);
    const ctx = trace.setSpan(parent, span);
    const carrier: Record<string, string> = {};
    w3c.inject(ctx, carrier, recordSetter);
    const traced = { ...call, headers: withHeaders(call.headers, carrier) };
    return { call: traced, end: (phases) => this.end(span, ctx, attributes, phases) };
  }

  /**
   * A container's start as a span of its own (`container_start`, a root:
   * several calls may wait for one start), from the time it asked for
   * memory until its function was ready. Each call that waited meanwhile
   * links its `agent_get_slot` to it. Undefined when not sampled.
   */
  containerStart(ref: { readonly id: string; readonly appId: string; readonly fnId: string }, t: StartTimings, readyEpochMs: number): SpanContext | undefined {
    const attributes: Attributes = { 'fn.app_id': ref.appId, 'fn.fn_id': ref.fnId, 'fn.container_id': ref.id, 'fn.token_ms': t.token_ms ?? 0, 'fn.image_ms': t.image_ms, 'fn.create_ms': t.create_ms, 'fn.start_ms': t.start_ms };
    const begun = readyEpochMs - t.start_ms - t.create_ms - t.image_ms - (t.token_ms ?? 0);
    const span = this.tracer.startSpan('container_start', { attributes, startTime: begun, root: true });
    span.end(readyEpochMs);
    const context = span.spanContext();
    return (context.traceFlags & TraceFlags.SAMPLED) !== 0 ? context : undefined;
  }

  private end(span: Span, ctx: Context, attributes: Attributes, p: CallPhases): void {
    // A call the sampler left out has no phases to write.
    if (!span.isRecording()) {
      span.end();
      return;
    }
    const child = (name: string, start: number, end: number, parent: Context = ctx): Context => {
      const s = this.tracer.startSpan(name, { attributes, startTime: start }, parent);
      s.end(end);
      return trace.setSpan(parent, s);
    };
    const slot = this.tracer.startSpan('agent_get_slot', { attributes, startTime: p.arrived, ...(p.startLink ? { links: [{ context: p.startLink }] } : {}) }, ctx);
    const slotCtx = trace.setSpan(ctx, slot);
    if (p.startMs !== undefined) {
      // The launch: memory and CPU first, then the container start.
      const started = Math.max(p.arrived, p.waitEnd - p.startMs);
      const asked = Math.max(p.arrived, started - p.tokenMs);
      const launch = child('agent_launch_cold', asked, p.waitEnd, slotCtx);
      child('agent_get_resource_token', asked, started, launch);
    } else child('agent_wait_hot', p.arrived, p.waitEnd, slotCtx);
    slot.end(p.waitEnd);
    if (p.execStart !== undefined) child(p.cold ? 'agent_cold_exec' : 'agent_hot_exec', p.execStart, p.execEnd ?? p.ended);
    span.setAttribute('http.response.status_code', p.status);
    if (p.status >= 500) span.setStatus({ code: SpanStatusCode.ERROR, ...(p.error ? { message: p.error } : {}) });
    span.end(p.ended);
  }
}

/** `raw` with the headers of `carrier` set (replacing any of the same name; the propagator's names are lower-case). */
function withHeaders(raw: RawHeaders, carrier: Record<string, string>): RawHeaders {
  const out = withoutHeaders(raw, Object.keys(carrier));
  for (const [n, v] of Object.entries(carrier)) out.push(n, v);
  return out;
}
