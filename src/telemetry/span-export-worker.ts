/**
 * The span export thread (started by span-export.ts's SpanExport): it
 * lowers its own priority, makes the spans of the records that arrive
 * (spanMaker), and exports them in batches of at most `batch` spans, one
 * request at a time. Past `maxQueued` spans waiting it drops new records;
 * it reports drops and failures (at most once a minute each), and its close
 * once what was queued is exported.
 */
import { randomFillSync } from 'node:crypto';
import { setPriority } from 'node:os';
import { parentPort, workerData } from 'node:worker_threads';
import { ExportResultCode, type ExportResult } from '@opentelemetry/core';
import { resourceFromAttributes } from '@opentelemetry/resources';
import type { ReadableSpan } from '@opentelemetry/sdk-trace-base';
import { spanMaker, type ExportData, type FromExport, type ToExport } from './span-export.js';

const REPORT_EVERY_MS = 60_000;

const data = workerData as ExportData;
const port = parentPort!;
const tell = (m: FromExport): void => port.postMessage(m);

try {
  // On Linux a thread's nice value is its own: this lowers the exporter only, not the server.
  setPriority(data.nice);
} catch {
  // Not allowed here (some containers): the exporter runs at the server's priority.
}

// Span ids from a pool of random bytes (one draw per 512 ids, not one per id).
const pool = Buffer.allocUnsafe(4096);
let at = pool.length;
function newId(): string {
  for (;;) {
    if (at + 8 > pool.length) {
      randomFillSync(pool);
      at = 0;
    }
    at += 8;
    const id = pool.toString('hex', at - 8, at);
    // All zeros is W3C's "invalid": drawn again.
    if (id !== '0000000000000000') return id;
  }
}

// Only the exporter of the chosen encoding is loaded.
const { OTLPTraceExporter } = data.protocol === 'http/json' ? await import('@opentelemetry/exporter-trace-otlp-http') : await import('@opentelemetry/exporter-trace-otlp-proto');
const exporter = new OTLPTraceExporter({ url: data.url });
const spansOf = spanMaker(resourceFromAttributes(data.resource), { name: 'fnts', version: data.version }, newId);

const queue: ReadableSpan[] = [];
let exporting = false;
let closing = false;
let dropped = 0;
let lastDropReport = 0;
let lastFailReport = 0;

function done(): void {
  void exporter
    .shutdown()
    .catch(() => undefined)
    .then(() => tell({ kind: 'closed', dropped }));
}

function pump(): void {
  if (exporting) return;
  if (queue.length === 0) {
    if (closing) done();
    return;
  }
  exporting = true;
  const batch = queue.splice(0, data.batch);
  exporter.export(batch, (result: ExportResult) => {
    exporting = false;
    if (result.code !== ExportResultCode.SUCCESS && Date.now() - lastFailReport > REPORT_EVERY_MS) {
      lastFailReport = Date.now();
      tell({ kind: 'failed', spans: batch.length, error: String(result.error?.message || result.error || 'unknown') });
    }
    pump();
  });
}

port.on('message', (m: ToExport) => {
  if (m.kind === 'records') {
    for (const r of m.records) {
      if (queue.length >= data.maxQueued) {
        dropped++;
        continue;
      }
      for (const s of spansOf(r)) queue.push(s);
    }
    if (dropped > 0 && Date.now() - lastDropReport > REPORT_EVERY_MS) {
      lastDropReport = Date.now();
      tell({ kind: 'dropped', dropped });
    }
  } else closing = true;
  pump();
});
