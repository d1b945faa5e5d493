import { describe, expect, it } from 'vitest';
import { openSqlite } from '../datastore/index.js';
import { runQueueContract } from './queue.contract.js';
import { SqlQueue } from './sql.js';

runQueueContract('sqlite', async (now) => {
  const ds = await openSqlite(':memory:');
  return { queue: new SqlQueue(() => ds.database(), now), close: () => ds.close() };
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
