/**
 * Span export off the event loop. The call path hands over one flat record
 * per sampled call (agent/spans.ts); records are buffered, and every
 * FLUSH_MS (or at MAX_BATCH) passed as one message to a worker thread, which
 * makes the spans Fn's agent makes from them and exports them with the OpenTelemetry
 * OTLP/HTTP exporter, one request at a time.
 *
 *   call ends -> record -> buffer -> postMessage(batch) -> [span-export-worker.ts] spanMaker -> OTLPTraceExporter
 *
 * Making spans and serializing them cost about 50 us per call on the event
 * loop (four to six spans each); here the event loop pays for a message per
 * batch. The thread runs at a lower priority than the server, so on a busy
 * machine tracing yields to serving calls; past MAX_QUEUED spans waiting it
 * drops new ones, and says so (as it says when the receiver fails) at most
 * once a minute.
 */
import { Worker } from 'node:worker_threads';
import { SpanKind, SpanStatusCode, TraceFlags, type Attributes, type HrTime, type Link, type SpanContext, type SpanStatus, type TraceState } from '@opentelemetry/api';
import type { InstrumentationScope } from '@opentelemetry/core';
import type { Resource } from '@opentelemetry/resources';
import type { ReadableSpan, TimedEvent } from '@opentelemetry/sdk-trace-base';
import type { Logger } from 'pino';
import type { SpanRecord } from '../agent/index.js';
import type { OtlpProtocol } from '../config/index.js';
import { Deadline } from '../time/index.js';

const FLUSH_MS = 500;
/** Records per message to the thread. */
const MAX_BATCH = 1024;
/** Spans per export request. */
const EXPORT_BATCH = 2048;
const WORKER_NICE = 19;
const CLOSE_MS = 5_000;

/** Seconds and nanoseconds, as the SDK keeps times. */
function hr(ms: number): HrTime {
  let s = Math.floor(ms / 1000);
  let ns = Math.round((ms - s * 1000) * 1e6);
  if (ns >= 1e9) {
    s += 1;
    ns -= 1e9;
  }
  return [s, ns];
}

const UNSET: SpanStatus = { code: SpanStatusCode.UNSET };
const NONE: never[] = [];

/**
 * The maker of the spans of one record, as plain objects of the SDK's
 * ReadableSpan shape (what the OTLP exporter reads): the export thread
 * (span-export-worker.ts) makes one and runs it for every record; spansOf
 * below runs the same code in place. `newId()` makes a span id; `resource`
 * and `scope` are the SDK's.
 */
export function spanMaker(resource: Resource, scope: InstrumentationScope, newId: () => string): (r: SpanRecord) => ReadableSpan[] {
  // One shape for every span, what is the same for all on its prototype: fewer objects per span.
  class MadeSpan implements ReadableSpan {
    declare readonly kind: SpanKind;
    declare readonly ended: boolean;
    declare readonly events: TimedEvent[];
    declare readonly droppedAttributesCount: number;
    declare readonly droppedEventsCount: number;
    declare readonly droppedLinksCount: number;
    declare readonly resource: Resource;
    declare readonly instrumentationScope: InstrumentationScope;
    readonly startTime: HrTime;
    readonly endTime: HrTime;

    constructor(
      private readonly ctx: SpanContext,
      readonly parentSpanContext: SpanContext | undefined,
      readonly name: string,
      start: number,
      end: number,
      readonly attributes: Attributes,
      readonly links: Link[],
      readonly status: SpanStatus,
    ) {
      this.startTime = hr(start);
      this.endTime = hr(end);
    }

    spanContext(): SpanContext {
      return this.ctx;
    }

    get duration(): HrTime {
      return hr(this.endTime[0] * 1000 + this.endTime[1] / 1e6 - (this.startTime[0] * 1000 + this.startTime[1] / 1e6));
    }
  }
  Object.assign(MadeSpan.prototype, {
    kind: SpanKind.INTERNAL,
    ended: true,
    events: NONE,
    droppedAttributesCount: 0,
    droppedEventsCount: 0,
    droppedLinksCount: 0,
    resource,
    instrumentationScope: scope,
  });

  return (r) => {
    if (r.kind === 'start') {
      const ctx: SpanContext = { traceId: r.traceId, spanId: r.spanId, traceFlags: TraceFlags.SAMPLED };
      const attributes = {
        'fn.app_id': r.appId,
        'fn.fn_id': r.fnId,
        'fn.container_id': r.containerId,
        'fn.token_ms': r.tokenMs,
        'fn.image_ms': r.imageMs,
        'fn.create_ms': r.createMs,
        'fn.start_ms': r.startMs,
      };
      return [new MadeSpan(ctx, undefined, 'container_start', r.begun, r.ready, attributes, NONE, UNSET)];
    }
    // The exporter reads only serialize(): the caller's tracestate goes on as it came.
    const state = r.traceState === '' ? undefined : ({ serialize: () => r.traceState } as TraceState);
    const attributes = { 'fn.call_id': r.callId, 'fn.app_id': r.appId, 'fn.fn_id': r.fnId };
    const ctxOf = (spanId: string): SpanContext => ({ traceId: r.traceId, spanId, traceFlags: TraceFlags.SAMPLED, traceState: state });
    const submit = ctxOf(r.spanId);
    const out: ReadableSpan[] = [];
    const child = (parent: SpanContext, name: string, start: number, end: number, links: Link[] = NONE): SpanContext => {
      const ctx = ctxOf(newId());
      out.push(new MadeSpan(ctx, parent, name, start, end, attributes, links, UNSET));
      return ctx;
    };
    const links = r.linkSpanId === '' ? NONE : [{ context: { traceId: r.linkTraceId, spanId: r.linkSpanId, traceFlags: TraceFlags.SAMPLED }, attributes: {} }];
    const slot = child(submit, 'agent_get_slot', r.arrived, r.waitEnd, links);
    if (!Number.isNaN(r.startMs)) {
      // The launch: memory and CPU first, then the container start.
      const started = Math.max(r.arrived, r.waitEnd - r.startMs);
      const asked = Math.max(r.arrived, started - r.tokenMs);
      const launch = child(slot, 'agent_launch_cold', asked, r.waitEnd);
      child(launch, 'agent_get_resource_token', asked, started);
    } else child(slot, 'agent_wait_hot', r.arrived, r.waitEnd);
    if (!Number.isNaN(r.execStart)) child(submit, r.cold ? 'agent_cold_exec' : 'agent_hot_exec', r.execStart, Number.isNaN(r.execEnd) ? r.ended : r.execEnd);
    const status: SpanStatus = r.status >= 500 ? (r.error === '' ? { code: SpanStatusCode.ERROR } : { code: SpanStatusCode.ERROR, message: r.error }) : UNSET;
    const parent = r.parentSpanId === '' ? undefined : { traceId: r.traceId, spanId: r.parentSpanId, traceFlags: TraceFlags.SAMPLED, isRemote: true };
    out.unshift(new MadeSpan(submit, parent, 'agent_submit', r.begun, r.ended, { ...attributes, 'http.response.status_code': r.status }, NONE, status));
    return out;
  };
}

/** The spans of one record, in the order they are exported (made in place: tests). */
export function spansOf(record: SpanRecord, resource: unknown, scope: { name: string; version?: string }, newId: () => string): unknown[] {
  return spanMaker(resource as Resource, scope, newId)(record);
}

/** What the export thread is started with. */
export interface ExportData {
  readonly url: string;
  readonly protocol: OtlpProtocol;
  /** The resource's attributes. */
  readonly resource: Record<string, string>;
  readonly version: string;
  /** The thread's nice value. */
  readonly nice: number;
  /** Spans per export request. */
  readonly batch: number;
  /** Spans waiting past which new records are dropped. */
  readonly maxQueued: number;
}

/** To the thread: records to export, or the end (export what is queued, then say `closed`). */
export type ToExport = { readonly kind: 'records'; readonly records: readonly SpanRecord[] } | { readonly kind: 'close' };

/** From the thread: drops and failures (at most once a minute each), and its close. */
export type FromExport = { kind: 'dropped'; dropped: number } | { kind: 'failed'; spans: number; error: string } | { kind: 'closed'; dropped: number };

export interface SpanExportOptions {
  /** The OTLP/HTTP traces URL. */
  readonly url: string;
  /** The encoding: protobuf (the standard's default, and about a third cheaper to make and send) or JSON. */
  readonly protocol: OtlpProtocol;
  /** The resource's attributes (service.name and so on). */
  readonly resource: Record<string, string>;
  readonly version: string;
  readonly log: Logger;
  /** Spans waiting to be exported past which new ones are dropped (default 50,000). */
  readonly maxQueued?: number;
}

/** Takes span records on the event loop and exports their spans from a thread of its own. */
export class SpanExport {
  private records: SpanRecord[] = [];
  private timer: NodeJS.Timeout | undefined;
  private readonly worker: Worker;
  private closing: Promise<void> | undefined;
  private onClosed: (() => void) | undefined;

  constructor(private readonly o: SpanExportOptions) {
    const workerData: ExportData = { url: o.url, protocol: o.protocol, resource: o.resource, version: o.version, nice: WORKER_NICE, batch: EXPORT_BATCH, maxQueued: o.maxQueued ?? 50_000 };
    // The thread is a module of its own, span-export-worker.ts, compiled beside this one.
    this.worker = new Worker(new URL('./span-export-worker.js', import.meta.url), { workerData });
    // The server's exit is not held up by an idle exporter.
    this.worker.unref();
    this.worker.on('message', (m: FromExport) => this.heard(m));
    this.worker.on('error', (err) => o.log.error({ err }, 'the span export thread failed; spans are no longer exported'));
    this.worker.on('exit', () => this.onClosed?.());
  }

  record(r: SpanRecord): void {
    if (this.closing) return;
    this.records.push(r);
    if (this.records.length >= MAX_BATCH) this.flush();
    else if (!this.timer) {
      this.timer = setTimeout(() => this.flush(), FLUSH_MS);
      this.timer.unref();
    }
  }

  private flush(): void {
    clearTimeout(this.timer);
    this.timer = undefined;
    if (this.records.length === 0) return;
    const records = this.records;
    this.records = [];
    this.worker.postMessage({ kind: 'records', records } satisfies ToExport);
  }

  private heard(m: FromExport): void {
    if (m.kind === 'dropped') this.o.log.warn({ dropped: m.dropped }, 'spans are being made faster than the trace receiver takes them: some were dropped');
    else if (m.kind === 'failed') this.o.log.warn({ spans: m.spans, error: m.error, url: this.o.url }, 'could not export spans to the trace receiver; check OTEL_EXPORTER_OTLP_ENDPOINT');
    else this.onClosed?.();
  }

  /** Exports what is buffered and stops the thread (within a few seconds, whatever the receiver does). Never rejects. */
  shutdown(): Promise<void> {
    this.closing ??= new Promise<void>((resolve) => {
      this.flush();
      // Held: the process waits for the bound, whatever the receiver does.
      const stop = new Deadline(CLOSE_MS, () => void this.worker.terminate());
      this.onClosed = () => {
        stop.clear();
        void this.worker.terminate().then(
          () => resolve(),
          () => resolve(),
        );
      };
      this.worker.postMessage({ kind: 'close' } satisfies ToExport);
    });
    return this.closing;
  }
}
