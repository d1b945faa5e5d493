/**
 * The embedded queue: detached calls in a table of the server's own
 * database (the SQLite file by default: nothing to set up). Each step is one
 * statement, so servers sharing the file never lease one item twice.
 */
import type { Kysely } from 'kysely';
import type { SqlSchema } from '../datastore/index.js';
import { IDEMPOTENCY_WINDOW_MS, type Queue, type QueuedCall } from './queue.js';

export class SqlQueue implements Queue {
  constructor(
    private readonly db: () => Kysely<SqlSchema>,
    private readonly now: () => number = Date.now,
  ) {}

  async enqueue(item: Omit<QueuedCall, 'attempts'>, key?: string): Promise<string> {
    const at = this.now();
    return this.db()
      .transaction()
      .execute(async (trx) => {
        if (key !== undefined) {
          const earlier = await trx
            .selectFrom('mq_keys')
            .select(['call_id', 'created_at'])
            .where('fn_id', '=', item.fnId)
            .where('key', '=', key)
            .executeTakeFirst();
          if (earlier && earlier.created_at > at - IDEMPOTENCY_WINDOW_MS) return earlier.call_id;
          await trx
            .insertInto('mq_keys')
            .values({ fn_id: item.fnId, key, call_id: item.id, created_at: at })
            .onConflict((oc) => oc.columns(['fn_id', 'key']).doUpdateSet({ call_id: item.id, created_at: at }))
            .execute();
          // Keys past their window are of no use any more.
          await trx.deleteFrom('mq_keys').where('created_at', '<=', at - IDEMPOTENCY_WINDOW_MS).execute();
        }
        await trx
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
        return item.id;
      });
  }

  async redrive(fnId: string, id: string): Promise<boolean> {
    const res = await this.db()
      .updateTable('mq')
      .set({ state: 'ready', attempts: 0, available_at: this.now(), lease_until: 0, leased_by: null, reason: null })
      .where('id', '=', id)
      .where('fn_id', '=', fnId)
      .where('state', '=', 'dead')
      .executeTakeFirst();
    return Number(res.numUpdatedRows) > 0;
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

  /** The database is the datastore's: it closes it. */
  async close(): Promise<void> {}

  async size(): Promise<number> {
    const row = await this.db()
      .selectFrom('mq')
      .select((eb) => eb.fn.countAll<number>().as('n'))
      .where('state', '!=', 'dead')
      .executeTakeFirstOrThrow();
    return Number(row.n);
  }

  async oldestReadyAt(): Promise<number | undefined> {
    const row = await this.db()
      .selectFrom('mq')
      .select((eb) => eb.fn.min<number | null>('available_at').as('at'))
      .where('state', '=', 'ready')
      .where('available_at', '<=', this.now())
      .executeTakeFirstOrThrow();
    return row.at === null ? undefined : Number(row.at);
  }
}
