import { closeSync, mkdtempSync, openSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pino } from 'pino';
import { afterEach, describe, expect, it } from 'vitest';
import type { Config } from '../config/index.js';
import { openSqlite, type CallLogEntry, type SqlDatastore } from '../datastore/index.js';
import type { CallRecord } from '../models/index.js';
import { SqliteQueue } from '../mq/index.js';
import { queueCalls, timedInvoker } from '../../test/support/calls.js';
import { createLogger, detachedCalls } from './common.js';

/** An invoker whose calls answer 200 after a millisecond, each with a log line. */
const quick = timedInvoker(
  1,
  () => 0,
  (c) => `ran ${c.id}\n`,
);

describe('detached calls on a node that keeps records', () => {
  let ds: SqlDatastore | undefined;
  let stop: (() => Promise<void>) | undefined;
  afterEach(async () => {
    await stop?.();
    await ds?.close();
  });

  it('write the records of calls that end together as a few batches, each with its log, before the queue lets the call go', async () => {
    ds = await openSqlite(':memory:');
    const queue = new SqliteQueue(ds.thread!);
    const stored = new Map<string, { record: CallRecord; log: string | undefined }>();
    let writes = 0;
    const store = {
      async insert(records: readonly CallRecord[], logs: readonly CallLogEntry[] = []) {
        writes++;
        // Still queued while its record is being written: acknowledged only after.
        const held = await queue.has(records.map((r) => r.id));
        expect(held.size).toBe(records.length);
        for (const r of records) stored.set(r.id, { record: r, log: logs.find((l) => l.callId === r.id)?.log });
      },
    };
    const { workers } = detachedCalls({
      config: { detached: { maxRedeliveries: 3, maxBodyBytes: 1024 } } as unknown as Config,
      invoker: quick,
      queue,
      resources: { waitAsyncCapacity: async () => undefined },
      store,
      instance: 'me',
      logger: pino({ level: 'silent' }),
      metrics: undefined,
    });
    stop = () => workers.close();
    const N = 60;
    await queueCalls(queue, N);
    workers.notify();
    const until = Date.now() + 10_000;
    while ((await queue.size()) > 0 && Date.now() < until) await new Promise((r) => setTimeout(r, 10));
    expect(await queue.size()).toBe(0);
    expect(stored.size).toBe(N);
    for (const [id, { record, log }] of stored) {
      expect(record.status).toBe('success');
      expect(log).toBe(`ran ${id}\n`);
    }
    // Gathered, not one write per call (60 calls of a millisecond end within a few lingers).
    expect(writes).toBeLessThanOrEqual(N / 4);
  });
});

describe("the server's log", () => {
  it.each(['text', 'json'] as const)('is written (%s) by the time the logging call returns, so that an exit right after it loses no line', (logFormat) => {
    const dir = mkdtempSync(join(tmpdir(), 'fnts-log-'));
    const fd = openSync(join(dir, 'out.log'), 'w');
    try {
      const logger = createLogger({ logLevel: 'info', logFormat } as Config, fd);
      logger.info({ port: 8080 }, 'fnts serving on :8080');
      logger.info('fnts stopped');
      const lines = readFileSync(join(dir, 'out.log'), 'utf8').trimEnd().split('\n');
      expect(lines).toHaveLength(2);
      if (logFormat === 'text') {
        expect(lines[0]).toMatch(/^\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3} [+-]\d{4}\] INFO: fnts serving on :8080 \{"port":8080\}$/);
        expect(lines[1]).toMatch(/INFO: fnts stopped$/);
      } else {
        expect(JSON.parse(lines[1]!)).toMatchObject({ level: 30, svc: 'fnts', msg: 'fnts stopped' });
      }
    } finally {
      closeSync(fd);
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
