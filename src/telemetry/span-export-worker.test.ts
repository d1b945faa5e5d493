import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { pino } from 'pino';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { threadNiceValues } from '../../test/support/threads.js';
import { eventually } from '../../test/support/wait.js';
import type { CallSpanRecord } from '../agent/index.js';
import { SpanExport } from './span-export.js';

/** A warm call that ran: four spans (agent_submit, agent_get_slot, agent_wait_hot, agent_hot_exec). */
function record(n: number): CallSpanRecord {
  const t = 1_700_000_000_000 + n;
  return {
    kind: 'call',
    traceId: '4bf92f3577b34da6a3ce929d0e0e4736',
    spanId: (n + 1).toString(16).padStart(16, '0'),
    parentSpanId: '',
    traceState: '',
    callId: `C${n}`,
    appId: 'A',
    fnId: 'F',
    begun: t,
    arrived: t,
    waitEnd: t + 1,
    execStart: t + 1,
    execEnd: t + 2,
    ended: t + 3,
    startMs: NaN,
    tokenMs: 0,
    cold: false,
    status: 200,
    error: '',
    linkTraceId: '',
    linkSpanId: '',
  };
}

/** An OTLP/HTTP JSON receiver that counts the spans posted to it. */
let receiver: Server;
let url: string;
let received = 0;
beforeAll(async () => {
  receiver = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      const body = JSON.parse(Buffer.concat(chunks).toString('utf8')) as { resourceSpans: Array<{ scopeSpans: Array<{ spans: unknown[] }> }> };
      for (const rs of body.resourceSpans) for (const ss of rs.scopeSpans) received += ss.spans.length;
      res.writeHead(200, { 'content-type': 'application/json' }).end('{}');
    });
  });
  await new Promise<void>((resolve) => receiver.listen(0, '127.0.0.1', resolve));
  url = `http://127.0.0.1:${(receiver.address() as AddressInfo).port}/v1/traces`;
});
afterAll(() => new Promise<void>((resolve) => receiver.close(() => resolve())));

describe('the span export thread', () => {
  it('exports from a thread at the lowest priority, drops records past its queue and says how many', async () => {
    received = 0;
    const warnings: Array<{ dropped?: number; msg: string }> = [];
    const log = pino({ level: 'warn' }, { write: (line: string) => void warnings.push(JSON.parse(line) as { dropped?: number; msg: string }) });
    const before = threadNiceValues().filter((n) => n === 19).length;
    const spans = new SpanExport({ url, protocol: 'http/json', resource: { 'service.name': 'test' }, version: '0', log, maxQueued: 10 });
    try {
      // One batch of 20 records: three fit (12 spans reach the queue's 10), the other 17 are dropped.
      for (let n = 0; n < 20; n++) spans.record(record(n));
      expect(await eventually(() => warnings.some((w) => w.dropped !== undefined), 5000, 20)).toBe(true);
      expect(warnings).toEqual([expect.objectContaining({ dropped: 17, msg: 'spans are being made faster than the trace receiver takes them: some were dropped' })]);
      expect(threadNiceValues().filter((n) => n === 19)).toHaveLength(before + 1);
    } finally {
      await spans.shutdown();
    }
    // What was queued is exported before the thread stops.
    expect(received).toBe(12);
  });
});
