import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import type { CallRecord } from '../../models/index.js';
import { threadNiceValues } from '../../../test/support/threads.js';
import { openSqlite } from './dialects.js';
import { workerThread } from './sqlite-thread.js';
import { threadWriter } from './sqlite-writer.js';

const dir = mkdtempSync(join(tmpdir(), 'fnts-writer-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

describe('the call record writer thread', () => {
  it('writes the records of a database file from a thread running below the server', async () => {
    const before = threadNiceValues().filter((n) => n === 10).length;
    const store = await openSqlite(join(dir, 'nice.db'));
    try {
      const record: CallRecord = {
        id: 'C1',
        fn_id: 'F',
        app_id: 'A',
        app_name: 'a',
        path: '/invoke/F',
        status: 'success',
        created_at: new Date().toISOString(),
        stats: [],
        timings: { wait_ms: 1, exec_ms: 2 },
      };
      await store.calls.insert([record], [{ callId: 'C1', fnId: 'F', appId: 'A', created: Date.now(), log: 'said hello\n' }]);
      expect(await store.calls.getCall('F', 'C1')).toEqual(record);
      expect(await store.calls.getLog('F', 'C1')).toBe('said hello\n');
      // The writer thread is there, at nice 10, while the server's own threads keep theirs.
      expect(threadNiceValues().filter((n) => n === 10)).toHaveLength(before + 1);
    } finally {
      await store.close();
    }
  });

  it("fails a batch the database refuses with the driver's words and code, and writes the next", async () => {
    const path = join(dir, 'refused.db');
    await (await openSqlite(path)).close();
    const thread = workerThread(path);
    const writer = threadWriter(thread);
    try {
      // A record without its fn: the calls table requires one.
      await expect(writer.write(['{"id":"C1","app_id":"A","status":"success","created_at":"2024-01-01T00:00:00.000Z"}'], [])).rejects.toMatchObject({
        message: 'call records not written: NOT NULL constraint failed: calls.fn_id',
        code: 'SQLITE_CONSTRAINT_NOTNULL',
      });
      await writer.write(['{"id":"C2","fn_id":"F","app_id":"A","status":"success","created_at":"2024-01-01T00:00:00.000Z"}'], []);
      expect(await writer.prune('2025-01-01T00:00:00.000Z', 100)).toBe(1);
    } finally {
      await thread.close();
    }
  });

  it('writes what comes while a batch is with the thread as one more batch, each caller answered once its own record is stored', async () => {
    const store = await openSqlite(join(dir, 'group.db'));
    try {
      const json = (i: number): string => JSON.stringify({ id: `G${i}`, fn_id: 'F', app_id: 'A', status: 'queued', created_at: new Date(Date.UTC(2026, 0, 1, 0, 0, i)).toISOString(), stats: [] });
      // As detached calls' records come: each awaited by its own caller, many at once.
      const seen = await Promise.all(
        Array.from({ length: 200 }, async (_, i) => {
          await store.calls.insertSerialized([json(i)]);
          // Stored when its promise settles: readable at once.
          return (await store.calls.getCall('F', `G${i}`)).id;
        }),
      );
      expect(seen).toEqual(Array.from({ length: 200 }, (_, i) => `G${i}`));
      // A record the database refuses fails its own caller only: the batch it joined is tried again part by part.
      const bad = store.calls.insertSerialized(['{"id":"X","app_id":"A","status":"success","created_at":"2024-01-01T00:00:00.000Z"}']);
      const joined = store.calls.insertSerialized([json(300)]);
      const results = await Promise.allSettled([bad, joined]);
      expect(results.map((r) => r.status)).toEqual(['rejected', 'fulfilled']);
      expect((await store.calls.getCall('F', 'G300')).id).toBe('G300');
      await store.calls.insertSerialized([json(301)]);
      expect((await store.calls.getCall('F', 'G301')).id).toBe('G301');
    } finally {
      await store.close();
    }
  });
});
