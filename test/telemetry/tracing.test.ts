/**
 * Traces, sent to a real OTLP/HTTP receiver started by the test: a call's
 * agent_submit span continues the caller's W3C traceparent, its phases are
 * children with the seed's names and the call's ids, and the function gets
 * the call's own traceparent.
 */
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import protobuf from 'protobufjs';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { probeImage } from '../support/functions.js';
import { startTestServer, type TestServer } from '../support/server.js';
import { eventually } from '../support/wait.js';

interface OtlpSpan {
  traceId: string;
  spanId: string;
  parentSpanId?: string;
  name: string;
  startTimeUnixNano: string;
  endTimeUnixNano: string;
  attributes: Array<{ key: string; value: { stringValue?: string; intValue?: string | number } }>;
  links?: Array<{ traceId: string; spanId: string }>;
}

/**
 * OTLP's trace request, the fields these tests read (opentelemetry-proto's
 * trace/v1 and common/v1, field numbers as published), to read the
 * protobuf encoding the way a collector does.
 */
const OTLP = protobuf.Root.fromJSON({
  nested: {
    AnyValue: { fields: { stringValue: { type: 'string', id: 1 }, intValue: { type: 'int64', id: 3 } } },
    KeyValue: { fields: { key: { type: 'string', id: 1 }, value: { type: 'AnyValue', id: 2 } } },
    Link: { fields: { traceId: { type: 'bytes', id: 1 }, spanId: { type: 'bytes', id: 2 } } },
    Span: {
      fields: {
        traceId: { type: 'bytes', id: 1 },
        spanId: { type: 'bytes', id: 2 },
        parentSpanId: { type: 'bytes', id: 4 },
        name: { type: 'string', id: 5 },
        startTimeUnixNano: { type: 'fixed64', id: 7 },
        endTimeUnixNano: { type: 'fixed64', id: 8 },
        attributes: { rule: 'repeated', type: 'KeyValue', id: 9 },
        links: { rule: 'repeated', type: 'Link', id: 13 },
      },
    },
    ScopeSpans: { fields: { spans: { rule: 'repeated', type: 'Span', id: 2 } } },
    ResourceSpans: { fields: { scopeSpans: { rule: 'repeated', type: 'ScopeSpans', id: 2 } } },
    ExportTraceServiceRequest: { fields: { resourceSpans: { rule: 'repeated', type: 'ResourceSpans', id: 1 } } },
  },
}).lookupType('ExportTraceServiceRequest');

/** A protobuf-encoded request in the JSON encoding's shape (ids in hex, times as decimal strings). */
function fromProtobuf(bytes: Buffer): { resourceSpans?: Array<{ scopeSpans?: Array<{ spans?: OtlpSpan[] }> }> } {
  const hex = (b: Uint8Array | undefined): string | undefined => (b && b.length > 0 ? Buffer.from(b).toString('hex') : undefined);
  const decoded = OTLP.toObject(OTLP.decode(bytes), { longs: String, bytes: Array, defaults: false, arrays: true }) as any;
  for (const rs of decoded.resourceSpans ?? [])
    for (const ss of rs.scopeSpans ?? [])
      ss.spans = (ss.spans ?? []).map((x: any) => ({
        ...x,
        traceId: hex(x.traceId),
        spanId: hex(x.spanId),
        parentSpanId: hex(x.parentSpanId),
        links: x.links.map((l: any) => ({ traceId: hex(l.traceId), spanId: hex(l.spanId) })),
      }));
  return decoded;
}

/** An OTLP/HTTP receiver: keeps every span posted to /v1/traces, in either encoding, and the encodings it saw. */
async function startReceiver(): Promise<{ url: string; spans: OtlpSpan[]; types: Set<string>; close(): Promise<void> }> {
  const spans: OtlpSpan[] = [];
  const types = new Set<string>();
  const server: Server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      const type = req.headers['content-type'] ?? '';
      const json = type.includes('json');
      if (req.url === '/v1/traces' && req.method === 'POST' && (json || type.includes('x-protobuf'))) {
        types.add(type);
        const body = Buffer.concat(chunks);
        const request = json ? JSON.parse(body.toString('utf8')) : fromProtobuf(body);
        for (const rs of request.resourceSpans ?? []) for (const ss of rs.scopeSpans ?? []) spans.push(...(ss.spans ?? []));
        res.writeHead(200, { 'content-type': json ? 'application/json' : 'application/x-protobuf' }).end(json ? '{}' : undefined);
      } else res.writeHead(415).end();
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    spans,
    types,
    close: () => new Promise<void>((resolve) => server.close(() => resolve())),
  };
}

const attr = (s: OtlpSpan, key: string): string | undefined => s.attributes.find((a) => a.key === key)?.value.stringValue;

describe('tracing (OTLP/HTTP)', () => {
  let receiver: Awaited<ReturnType<typeof startReceiver>>;
  let s: TestServer;
  let fn: any;

  beforeAll(async () => {
    receiver = await startReceiver();
    s = await startTestServer({ OTEL_EXPORTER_OTLP_ENDPOINT: receiver.url, OTEL_SERVICE_NAME: 'fnts-test' });
    const app = await s.app();
    fn = await s.fn(app, await probeImage());
  });
  afterAll(async () => {
    await s?.close();
    await receiver?.close();
  });

  it("continues the caller's trace, with the seed's span names, and hands the function the call's traceparent", async () => {
    const traceId = '4bf92f3577b34da6a3ce929d0e0e4736';
    const callerSpan = '00f067aa0ba902b7';
    const first = await s.invoke(fn.id, {}, { traceparent: `00-${traceId}-${callerSpan}-01` });
    expect(first.status).toBe(200);
    const second = await s.invoke(fn.id, {}, { traceparent: `00-${traceId}-${callerSpan}-01` });
    const callIds = [first.headers.get('fn-call-id')!, second.headers.get('fn-call-id')!];

    const complete = await eventually(() => receiver.spans.filter((x) => x.name === 'agent_submit').length >= 2, 10_000);
    expect(complete).toBe(true);
    const submits = receiver.spans.filter((x) => x.name === 'agent_submit');
    expect(submits).toHaveLength(2);
    for (const [i, submit] of submits.entries()) {
      expect(submit.traceId).toBe(traceId);
      expect(submit.parentSpanId).toBe(callerSpan);
      expect(attr(submit, 'fn.call_id')).toBe(callIds[i]);
      expect(attr(submit, 'fn.fn_id')).toBe(fn.id);
      expect(attr(submit, 'fn.app_id')).toBe(fn.app_id);
    }
    const children = (parent: OtlpSpan): string[] =>
      receiver.spans
        .filter((x) => x.parentSpanId === parent.spanId)
        .map((x) => x.name)
        .sort();
    // The first call waited for a container start; the second found it warm.
    expect(children(submits[0]!)).toEqual(['agent_get_slot', 'agent_hot_exec']);
    const slot0 = receiver.spans.find((x) => x.parentSpanId === submits[0]!.spanId && x.name === 'agent_get_slot')!;
    expect(children(slot0)).toEqual(['agent_launch_cold']);
    const launch = receiver.spans.find((x) => x.parentSpanId === slot0.spanId)!;
    expect(children(launch)).toEqual(['agent_get_resource_token']);
    const slot1 = receiver.spans.find((x) => x.parentSpanId === submits[1]!.spanId && x.name === 'agent_get_slot')!;
    expect(children(slot1)).toEqual(['agent_wait_hot']);
    // Children sit inside their parent's time.
    const exec = receiver.spans.find((x) => x.parentSpanId === submits[1]!.spanId && x.name === 'agent_hot_exec')!;
    expect(BigInt(exec.startTimeUnixNano)).toBeGreaterThanOrEqual(BigInt(submits[1]!.startTimeUnixNano));
    expect(BigInt(exec.endTimeUnixNano)).toBeLessThanOrEqual(BigInt(submits[1]!.endTimeUnixNano));

    // The container's start is a span of its own, which the call that waited for it links to; the warm call does not.
    const starts = receiver.spans.filter((x) => x.name === 'container_start' && attr(x, 'fn.fn_id') === fn.id);
    expect(starts).toHaveLength(1);
    expect(slot0.links?.map((l) => l.spanId)).toEqual([starts[0]!.spanId]);
    expect(slot1.links ?? []).toEqual([]);

    // A call the caller did not sample is not traced (parent-based sampling).
    const unsampled = await s.invoke(fn.id, {}, { traceparent: `00-${'1'.repeat(32)}-${callerSpan}-00` });
    expect(unsampled.status, unsampled.text).toBe(200);
    // A sampled call made after it: once its spans are here, the unsampled call's would be too
    // (spans leave in the order their calls end, in batches).
    const laterTrace = '2'.repeat(32);
    expect((await s.invoke(fn.id, {}, { traceparent: `00-${laterTrace}-${callerSpan}-01` })).status).toBe(200);
    expect(await eventually(() => receiver.spans.some((x) => x.name === 'agent_submit' && x.traceId === laterTrace), 10_000)).toBe(true);
    expect(receiver.spans.filter((x) => x.traceId === '1'.repeat(32))).toEqual([]);
    expect(receiver.spans.filter((x) => x.name === 'agent_submit')).toHaveLength(3);

    // The function saw the call's own traceparent: same trace, the submit span as parent.
    const seen = second.json.headers.traceparent ?? second.json.headers.Traceparent;
    expect(String(seen)).toBe(`00-${traceId}-${submits[1]!.spanId}-01`);
    // OTLP's default encoding, protobuf, unless told otherwise.
    expect([...receiver.types]).toEqual(['application/x-protobuf']);
  });

  it('links every call that waited for a container start to that start', async () => {
    const app = await s.app();
    const slow = await s.fn(app, await probeImage(), { config: { MODE: 'slow-ready', READY_AFTER_MS: '700' } });
    const answers = await Promise.all([0, 1, 2].map(() => s.invoke(slow.id, {})));
    expect(answers.map((a) => a.status)).toEqual([200, 200, 200]);
    const ids = answers.map((a) => a.headers.get('fn-call-id')!);
    const submitsOf = (): OtlpSpan[] => receiver.spans.filter((x) => x.name === 'agent_submit' && ids.includes(attr(x, 'fn.call_id') ?? ''));
    expect(await eventually(() => submitsOf().length === 3, 10_000)).toBe(true);
    const starts = new Set(receiver.spans.filter((x) => x.name === 'container_start' && attr(x, 'fn.fn_id') === slow.id).map((x) => x.spanId));
    expect(starts.size).toBeGreaterThan(0);
    // All three arrived before any container was ready: each slot links to the start that served it.
    for (const submit of submitsOf()) {
      const slot = receiver.spans.find((x) => x.parentSpanId === submit.spanId && x.name === 'agent_get_slot')!;
      expect(slot.links).toHaveLength(1);
      expect(starts.has(slot.links![0]!.spanId)).toBe(true);
    }
  });

  it('sends spans as OTLP JSON when OTEL_EXPORTER_OTLP_PROTOCOL=http/json', async () => {
    const json = await startReceiver();
    const other = await startTestServer({ OTEL_EXPORTER_OTLP_ENDPOINT: json.url, OTEL_EXPORTER_OTLP_PROTOCOL: 'http/json' });
    try {
      const jfn = await other.fn(await other.app(), await probeImage());
      const res = await other.invoke(jfn.id, {});
      expect(res.status).toBe(200);
      expect(await eventually(() => json.spans.some((x) => x.name === 'agent_submit' && attr(x, 'fn.call_id') === res.headers.get('fn-call-id')), 10_000)).toBe(true);
      expect([...json.types]).toEqual(['application/json']);
    } finally {
      await other.close();
      await json.close();
    }
  });
});
