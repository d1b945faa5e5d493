/**
 * The embedded queue: detached calls in a table of the server's own
 * database (the SQLite file by default: nothing to set up). Each step is one
 * statement, so servers sharing the file never lease one item twice.
 */
import type { Kysely } from 'kysely';
import type { SqlSchema } from '../datastore/index.js';
import type { Queue, QueuedCall } from './queue.js';

export class SqlQueue implements Queue {
  constructor(
    private readonly db: () => Kysely<SqlSchema>,
    private readonly now: () => number = Date.now,
  ) {}

  async enqueue(item: Omit<QueuedCall, 'attempts'>): Promise<void> {
    const at = this.now();
    await this.db()
      .insertInto('mq')
      .values({
        id: item.id,
        fn_id: item.fnId,
        call_json: item.callJson,
        body: item.body,
        attempts: 0,
        max_attempts: item.maxAttempts,
        state: 'ready',
        enqueued_at: at,
        available_at: at,
        lease_until: 0,
        leased_by: null,
        reason: null,
      })
      .execute();
  }

  async reserve(leaseMs: number, holder: string): Promise<QueuedCall | undefined> {
    const now = this.now();
    const row = await this.db()
      .updateTable('mq')
      .set({ state: 'leased', lease_until: now + leaseMs, leased_by: holder })
      .where('id', '=', (eb) =>
        eb
          .selectFrom('mq')
          .select('id')
          .where((w) => w.or([w.and([w('state', '=', 'ready'), w('available_at', '<=', now)]), w.and([w('state', '=', 'leased'), w('lease_until', '<=', now)])]))
          .orderBy('available_at')
          .orderBy('enqueued_at')
          .limit(1),
      )
      .returningAll()
      .executeTakeFirst();
    if (!row) return undefined;
    return { id: row.id, fnId: row.fn_id, callJson: row.call_json, body: Buffer.from(row.body), attempts: row.attempts, maxAttempts: row.max_attempts };
  }

  async releaseDead(isDead: (holder: string) => boolean): Promise<number> {
    const holders = await this.db().selectFrom('mq').select('leased_by').distinct().where('state', '=', 'leased').execute();
    let released = 0;
    for (const { leased_by: holder } of holders) {
      if (holder === null || !isDead(holder)) continue;
      const res = await this.db().updateTable('mq').set({ state: 'ready', lease_until: 0, leased_by: null }).where('state', '=', 'leased').where('leased_by', '=', holder).executeTakeFirst();
      released += Number(res.numUpdatedRows);
    }
    return released;
  }

  async extend(id: string, leaseMs: number): Promise<void> {
    await this.db().updateTable('mq').set({ lease_until: this.now() + leaseMs }).where('id', '=', id).where('state', '=', 'leased').execute();
  }

  async ack(id: string): Promise<void> {
    await this.db().deleteFrom('mq').where('id', '=', id).execute();
  }

  async retry(id: string, delayMs: number, counted: boolean): Promise<void> {
    await this.db()
      .updateTable('mq')
      .set((eb) => ({ state: 'ready', available_at: this.now() + delayMs, lease_until: 0, leased_by: null, attempts: counted ? eb('attempts', '+', 1) : eb.ref('attempts') }))
      .where('id', '=', id)
      .execute();
  }

  async dead(id: string, reason: string): Promise<void> {
    await this.db()
      .updateTable('mq')
      .set((eb) => ({ state: 'dead', reason, attempts: eb('attempts', '+', 1) }))
      .where('id', '=', id)
      .execute();
  }

  async size(): Promise<number> {
    const row = await this.db()
      .selectFrom('mq')
      .select((eb) => eb.fn.countAll<number>().as('n'))
      .where('state', '!=', 'dead')
      .executeTakeFirstOrThrow();
    return Number(row.n);
  }
}
