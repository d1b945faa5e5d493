import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { openSqlite } from '../datastore/index.js';
import { runQueueContract } from './queue.contract.js';
import { SqlQueue } from './sql.js';
import { SqliteQueue } from './sqlite.js';

runQueueContract('sqlite, statements on the event loop (as on Postgres and MySQL)', async (now) => {
  const ds = await openSqlite(':memory:');
  return { queue: new SqlQueue(() => ds.database(), now), close: () => ds.close() };
});

runQueueContract('sqlite in memory, through the writer thread (run in place)', async (now) => {
  const ds = await openSqlite(':memory:');
  return { queue: new SqliteQueue(ds.thread!, now), close: () => ds.close() };
});

const dir = mkdtempSync(join(tmpdir(), 'fnts-mq-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));
let files = 0;

runQueueContract('sqlite file, through the writer thread', async (now) => {
  const ds = await openSqlite(join(dir, `contract-${files++}.db`));
  return { queue: new SqliteQueue(ds.thread!, now), close: () => ds.close() };
});

describe('the queue on a SQLite file', () => {
  it('hands a large body to the thread whole, stores it in chunks and gives it back byte for byte', async () => {
    const ds = await openSqlite(join(dir, 'big.db'));
    const queue = new SqliteQueue(ds.thread!);
    try {
      const body = Buffer.alloc(1024 * 1024 + 5);
      for (let i = 0; i < body.length; i++) body[i] = i % 251;
      const copy = Buffer.from(body);
      await queue.enqueue({ id: 'big', fnId: 'f1', callJson: '{}', body, maxAttempts: 3 });
      // Its memory went to the thread rather than being copied.
      expect(body.byteLength).toBe(0);
      const chunks = await ds.database().selectFrom('mq_bodies').select('seq').where('id', '=', 'big').execute();
      expect(chunks.length).toBe(5);
      expect((await queue.reserve(1000, 'w'))!.body.equals(copy)).toBe(true);
    } finally {
      await ds.close();
    }
  });
});

describe('the SQL queue', () => {
  it('writes a large body a chunk at a time, and removes the body of an enqueue that never finished once it is old', async () => {
    const ds = await openSqlite(':memory:');
    let t = 1_000_000;
    const queue = new SqlQueue(
      () => ds.database(),
      () => t,
    );
    try {
      const body = Buffer.alloc(1024 * 1024 + 5, 7);
      await queue.enqueue({ id: 'big', fnId: 'f1', callJson: '{}', body, maxAttempts: 3 });
      const chunks = await ds.database().selectFrom('mq_bodies').select(['seq']).where('id', '=', 'big').execute();
      expect(chunks.length).toBeGreaterThan(1);
      expect((await queue.reserve(1000, 'w'))!.body.equals(body)).toBe(true);
      // A body written by an enqueue that crashed before its item.
      await ds
        .database()
        .insertInto('mq_bodies')
        .values({ id: 'orphan', seq: 0, chunk: Buffer.from('x'), created_at: t })
        .execute();
      t += 60_000;
      await queue.pruneDead(t);
      expect(await ds.database().selectFrom('mq_bodies').select('id').where('id', '=', 'orphan').execute()).toHaveLength(1);
      t += 10 * 60_000;
      await queue.pruneDead(t);
      expect(await ds.database().selectFrom('mq_bodies').select('id').distinct().execute()).toEqual([{ id: 'big' }]);
      await queue.ack('big');
      expect(await ds.database().selectFrom('mq_bodies').select('id').execute()).toEqual([]);
    } finally {
      await ds.close();
    }
  });
});
