/**
 * Span export off the event loop. The call path hands over one flat record
 * per sampled call (agent/spans.ts); records are buffered, and every
 * FLUSH_MS (or at MAX_BATCH) passed as one message to a worker thread, which
 * makes the spans Fn's agent makes from them and exports them with the OpenTelemetry
 * OTLP/HTTP exporter, one request at a time.
 *
 *   call ends -> record -> buffer -> postMessage(batch) -> [thread] spans -> OTLPTraceExporter
 *
 * Making spans and serializing them cost about 50 us per call on the event
 * loop (four to six spans each); here the event loop pays for a message per
 * batch. The thread runs at a lower priority than the server, so on a busy
 * machine tracing yields to serving calls; past MAX_QUEUED spans waiting it
 * drops new ones, and says so (as it says when the receiver fails) at most
 * once a minute.
 */
import { createRequire } from 'node:module';
import { Worker } from 'node:worker_threads';
import type { Logger } from 'pino';
import type { SpanRecord } from '../agent/index.js';

const FLUSH_MS = 500;
/** Records per message to the thread. */
const MAX_BATCH = 1024;
/** Spans per export request. */
const EXPORT_BATCH = 2048;
const WORKER_NICE = 19;
const CLOSE_MS = 5_000;

/**
 * The spans of one record, as plain objects of the SDK's ReadableSpan shape
 * (what the OTLP exporter reads). Plain CommonJS source, so that the thread
 * and the unit test (spansOf below) run the very same code; `newId()` makes
 * a span id, `resource` and `scope` are the SDK's.
 */
const PROGRAM = `
const hr = (ms) => {
  let s = Math.floor(ms / 1000);
  let ns = Math.round((ms - s * 1000) * 1e6);
  if (ns >= 1e9) { s += 1; ns -= 1e9; }
  return [s, ns];
};
const UNSET = { code: 0 };
const NONE = [];
// One shape for every span, what is the same for all on its prototype: fewer objects per span.
function Span(ctx, parent, name, start, end, attributes, links, status) {
  this.ctx = ctx;
  this.parentSpanContext = parent;
  this.name = name;
  this.startTime = hr(start);
  this.endTime = hr(end);
  this.attributes = attributes;
  this.links = links;
  this.status = status;
}
Span.prototype.spanContext = function () { return this.ctx; };
Object.defineProperty(Span.prototype, 'duration', { get() { return hr(this.endTime[0] * 1000 + this.endTime[1] / 1e6 - (this.startTime[0] * 1000 + this.startTime[1] / 1e6)); } });
Object.assign(Span.prototype, { kind: 0, ended: true, events: NONE, droppedAttributesCount: 0, droppedEventsCount: 0, droppedLinksCount: 0, resource, instrumentationScope: scope });
const span = (ctx, parent, name, start, end, attributes, links, status) => new Span(ctx, parent, name, start, end, attributes, links, status);
return function spansOf(r) {
  if (r.kind === 'start') {
    const ctx = { traceId: r.traceId, spanId: r.spanId, traceFlags: 1 };
    const attributes = { 'fn.app_id': r.appId, 'fn.fn_id': r.fnId, 'fn.container_id': r.containerId, 'fn.token_ms': r.tokenMs, 'fn.image_ms': r.imageMs, 'fn.create_ms': r.createMs, 'fn.start_ms': r.startMs };
    return [span(ctx, undefined, 'container_start', r.begun, r.ready, attributes, NONE, UNSET)];
  }
  const state = r.traceState === '' ? undefined : { serialize: () => r.traceState };
  const attributes = { 'fn.call_id': r.callId, 'fn.app_id': r.appId, 'fn.fn_id': r.fnId };
  const ctxOf = (spanId) => ({ traceId: r.traceId, spanId, traceFlags: 1, traceState: state });
  const submit = ctxOf(r.spanId);
  const out = [];
  const child = (parent, name, start, end, links) => {
    const ctx = ctxOf(newId());
    out.push(span(ctx, parent, name, start, end, attributes, links || NONE, UNSET));
    return ctx;
  };
  const links = r.linkSpanId === '' ? NONE : [{ context: { traceId: r.linkTraceId, spanId: r.linkSpanId, traceFlags: 1 }, attributes: {} }];
  const slot = child(submit, 'agent_get_slot', r.arrived, r.waitEnd, links);
  if (!Number.isNaN(r.startMs)) {
    // The launch: memory and CPU first, then the container start.
    const started = Math.max(r.arrived, r.waitEnd - r.startMs);
    const asked = Math.max(r.arrived, started - r.tokenMs);
    const launch = child(slot, 'agent_launch_cold', asked, r.waitEnd);
    child(launch, 'agent_get_resource_token', asked, started);
  } else child(slot, 'agent_wait_hot', r.arrived, r.waitEnd);
  if (!Number.isNaN(r.execStart)) child(submit, r.cold ? 'agent_cold_exec' : 'agent_hot_exec', r.execStart, Number.isNaN(r.execEnd) ? r.ended : r.execEnd);
  const status = r.status >= 500 ? (r.error === '' ? { code: 2 } : { code: 2, message: r.error }) : UNSET;
  const parent = r.parentSpanId === '' ? undefined : { traceId: r.traceId, spanId: r.parentSpanId, traceFlags: 1, isRemote: true };
  out.unshift(span(submit, parent, 'agent_submit', r.begun, r.ended, { ...attributes, 'http.response.status_code': r.status }, NONE, status));
  return out;
};
`;

/** The program above, run in place (tests): the spans of one record, in the order they are exported. */
export function spansOf(record: SpanRecord, resource: unknown, scope: { name: string; version?: string }, newId: () => string): unknown[] {
  return (new Function('resource', 'scope', 'newId', PROGRAM)(resource, scope, newId) as (r: SpanRecord) => unknown[])(record);
}

// The thread: lowers its own priority, exports what arrives in batches of
// at most EXPORT_BATCH spans, one request at a time, and reports drops and
// failures (at most once a minute each) and its close.
const WORKER = `
const { parentPort, workerData } = require('node:worker_threads');
try { require('node:os').setPriority(workerData.nice); } catch {}
const { randomFillSync } = require('node:crypto');
// Span ids from a pool of random bytes (one draw per 512 ids, not one per id).
const pool = Buffer.allocUnsafe(4096);
let at = pool.length;
// (The call path's ids come from agent/spans.ts's pool; this program cannot import it.) All zeros is W3C's "invalid": drawn again.
function newId() {
  for (;;) {
    if (at + 8 > pool.length) { randomFillSync(pool); at = 0; }
    at += 8;
    const id = pool.toString('hex', at - 8, at);
    if (id !== '0000000000000000') return id;
  }
}
const { OTLPTraceExporter } = require(workerData.exporter);
const { resourceFromAttributes } = require(workerData.resources);
const exporter = new OTLPTraceExporter({ url: workerData.url });
const resource = resourceFromAttributes(workerData.resource);
const scope = { name: 'fnts', version: workerData.version };
const spansOf = (function (resource, scope, newId) { ${PROGRAM} })(resource, scope, newId);
const queue = [];
let exporting = false, closing = false, dropped = 0, lastDropReport = 0, lastFailReport = 0;
function done() {
  exporter.shutdown().catch(() => {}).then(() => parentPort.postMessage({ kind: 'closed', dropped }));
}
function pump() {
  if (exporting) return;
  if (queue.length === 0) { if (closing) done(); return; }
  exporting = true;
  const batch = queue.splice(0, workerData.batch);
  exporter.export(batch, (result) => {
    exporting = false;
    if (result.code !== 0 && Date.now() - lastFailReport > 60000) {
      lastFailReport = Date.now();
      parentPort.postMessage({ kind: 'failed', spans: batch.length, error: String((result.error && result.error.message) || result.error || 'unknown') });
    }
    pump();
  });
}
parentPort.on('message', (m) => {
  if (m.kind === 'records') {
    for (const r of m.records) {
      if (queue.length >= workerData.maxQueued) { dropped++; continue; }
      for (const s of spansOf(r)) queue.push(s);
    }
    if (dropped > 0 && Date.now() - lastDropReport > 60000) {
      lastDropReport = Date.now();
      parentPort.postMessage({ kind: 'dropped', dropped });
    }
  } else if (m.kind === 'close') closing = true;
  pump();
});
`;

export interface SpanExportOptions {
  /** The OTLP/HTTP traces URL. */
  readonly url: string;
  /** The encoding: protobuf (the standard's default, and about a third cheaper to make and send) or JSON. */
  readonly protocol: 'http/protobuf' | 'http/json';
  /** The resource's attributes (service.name and so on). */
  readonly resource: Record<string, string>;
  readonly version: string;
  readonly log: Logger;
  /** Spans waiting to be exported past which new ones are dropped (default 50,000). */
  readonly maxQueued?: number;
}

type FromWorker = { kind: 'dropped'; dropped: number } | { kind: 'failed'; spans: number; error: string } | { kind: 'closed'; dropped: number };

/** Takes span records on the event loop and exports their spans from a thread of its own. */
export class SpanExport {
  private records: SpanRecord[] = [];
  private timer: NodeJS.Timeout | undefined;
  private readonly worker: Worker;
  private closing: Promise<void> | undefined;
  private onClosed: (() => void) | undefined;

  constructor(private readonly o: SpanExportOptions) {
    const require = createRequire(import.meta.url);
    this.worker = new Worker(WORKER, {
      eval: true,
      workerData: {
        url: o.url,
        resource: o.resource,
        version: o.version,
        nice: WORKER_NICE,
        batch: EXPORT_BATCH,
        maxQueued: o.maxQueued ?? 50_000,
        exporter: require.resolve(o.protocol === 'http/json' ? '@opentelemetry/exporter-trace-otlp-http' : '@opentelemetry/exporter-trace-otlp-proto'),
        resources: require.resolve('@opentelemetry/resources'),
      },
    });
    // The server's exit is not held up by an idle exporter.
    this.worker.unref();
    this.worker.on('message', (m: FromWorker) => this.heard(m));
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
    this.worker.postMessage({ kind: 'records', records });
  }

  private heard(m: FromWorker): void {
    if (m.kind === 'dropped') this.o.log.warn({ dropped: m.dropped }, 'spans are being made faster than the trace receiver takes them: some were dropped');
    else if (m.kind === 'failed') this.o.log.warn({ spans: m.spans, error: m.error, url: this.o.url }, 'could not export spans to the trace receiver; check OTEL_EXPORTER_OTLP_ENDPOINT');
    else this.onClosed?.();
  }

  /** Exports what is buffered and stops the thread (within a few seconds, whatever the receiver does). Never rejects. */
  shutdown(): Promise<void> {
    this.closing ??= new Promise<void>((resolve) => {
      this.flush();
      const stop = setTimeout(() => void this.worker.terminate(), CLOSE_MS);
      this.onClosed = () => {
        clearTimeout(stop);
        void this.worker.terminate().then(() => resolve(), () => resolve());
      };
      this.worker.postMessage({ kind: 'close' });
    });
    return this.closing;
  }
}
