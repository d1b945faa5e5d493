/**
 * The embedded queue: detached calls in a table of the server's own
 * database (the SQLite file by default: nothing to set up). Each step on an
 * item is one statement, so servers sharing the file never lease one item
 * twice, and a lease taken back is counted (redeliveries) in the statement
 * that takes it.
 *
 * A call's body lives apart from its item (mq_bodies), in chunks of
 * BODY_CHUNK_BYTES, written once when it is queued and read once when it
 * is leased: the item's row, updated at every lease, retry and extension,
 * stays small, and since SQLite runs on the event loop, a large body is
 * written and read a chunk per turn of it, never in one long stall.
 *
 *   enqueue:  body chunks (one statement each) ──▶ item (+ idempotency key), one transaction
 *   reserve:  item leased (one statement) ──▶ body chunks read into one buffer
 *   ack, prune: item, then its body
 *
 * A body no item refers to (an enqueue cut short by a crash) is removed by
 * pruneDead once ORPHAN_BODY_MS old.
 */
import type { ExpressionBuilder, Kysely } from 'kysely';
import { kindOf, type SqlKind, type SqlSchema } from '../datastore/index.js';
import { IDEMPOTENCY_WINDOW_MS, type Queue, type QueuedCall } from './queue.js';

/** Ids per `IN (...)` list: well under every database's limit on bound parameters. */
const IDS_PER_QUERY = 500;
/** A body is stored and read in chunks of this size, one per turn of the event loop. */
const BODY_CHUNK_BYTES = 256 * 1024;
/** A body with no item this long after it was written is a leftover: its enqueue never finished. */
const ORPHAN_BODY_MS = 10 * 60_000;

/** Lets whatever else waits on the event loop (requests, timers) go before the next chunk. */
function nextTurn(): Promise<void> {
  return new Promise((resolve) => setImmediate(resolve));
}

export class SqlQueue implements Queue {
  /** Which database the queue is in: how an item is leased differs (see reserve). */
  private readonly kind: SqlKind;

  constructor(
    private readonly db: () => Kysely<SqlSchema>,
    private readonly now: () => number = Date.now,
  ) {
    this.kind = kindOf(db());
  }

  async enqueue(item: Omit<QueuedCall, 'attempts' | 'redeliveries'>, key?: string): Promise<string> {
    const at = this.now();
    const { body } = item;
    try {
      for (let off = 0, seq = 0; off < body.length; off += BODY_CHUNK_BYTES, seq++) {
        if (seq > 0) await nextTurn();
        await this.db()
          .insertInto('mq_bodies')
          .values({ id: item.id, seq, chunk: body.subarray(off, off + BODY_CHUNK_BYTES), created_at: at })
          .execute();
      }
      const id = await this.db()
        .transaction()
        .execute(async (trx) => {
          if (key !== undefined) {
            const earlier = await trx.selectFrom('mq_keys').select(['call_id', 'created_at']).where('fn_id', '=', item.fnId).where('key', '=', key).executeTakeFirst();
            if (earlier && earlier.created_at > at - IDEMPOTENCY_WINDOW_MS) return earlier.call_id;
            const insert = trx.insertInto('mq_keys').values({ fn_id: item.fnId, key, call_id: item.id, created_at: at });
            await (
              this.kind === 'mysql'
                ? insert.onDuplicateKeyUpdate({ call_id: item.id, created_at: at })
                : insert.onConflict((oc) => oc.columns(['fn_id', 'key']).doUpdateSet({ call_id: item.id, created_at: at }))
            ).execute();
            // Keys past their window are of no use any more.
            await trx
              .deleteFrom('mq_keys')
              .where('created_at', '<=', at - IDEMPOTENCY_WINDOW_MS)
              .execute();
          }
          await trx
            .insertInto('mq')
            .values({
              id: item.id,
              fn_id: item.fnId,
              call_json: item.callJson,
              body_bytes: body.length,
              attempts: 0,
              max_attempts: item.maxAttempts,
              state: 'ready',
              enqueued_at: at,
              available_at: at,
              lease_until: 0,
              leased_by: null,
              reason: null,
              redeliveries: 0,
              dead_at: null,
            })
            .execute();
          return item.id;
        });
      // The same submission again: its body is not needed.
      if (id !== item.id) await this.db().deleteFrom('mq_bodies').where('id', '=', item.id).execute();
      return id;
    } catch (err) {
      await this.db()
        .deleteFrom('mq_bodies')
        .where('id', '=', item.id)
        .execute()
        .catch(() => undefined);
      throw err;
    }
  }

  async redrive(fnId: string, id: string): Promise<boolean> {
    const res = await this.db()
      .updateTable('mq')
      .set({ state: 'ready', attempts: 0, redeliveries: 0, available_at: this.now(), lease_until: 0, leased_by: null, reason: null, dead_at: null })
      .where('id', '=', id)
      .where('fn_id', '=', fnId)
      .where('state', '=', 'dead')
      .executeTakeFirst();
    return Number(res.numUpdatedRows) > 0;
  }

  async reserve(leaseMs: number, holder: string): Promise<QueuedCall | undefined> {
    const row = this.kind === 'mysql' ? await this.leaseMysql(leaseMs, holder) : await this.leaseOne(leaseMs, holder);
    if (!row) return undefined;
    const body = await this.readBody(row.id, Number(row.body_bytes));
    return { id: row.id, fnId: row.fn_id, callJson: row.call_json, body, attempts: row.attempts, maxAttempts: row.max_attempts, redeliveries: row.redeliveries };
  }

  async reserveBatch(max: number, leaseMs: number, holder: string): Promise<QueuedCall[]> {
    const leased: QueuedCall[] = [];
    while (leased.length < max) {
      const item = await this.reserve(leaseMs, holder);
      if (!item) break;
      leased.push(item);
    }
    return leased;
  }

  /** What a lease sets: an item still `leased` is one whose lease ended, taken back and counted. */
  private leaseSet(now: number, leaseMs: number, holder: string) {
    // redeliveries first: MySQL assigns left to right, each assignment seeing the ones before it.
    return (eb: ExpressionBuilder<SqlSchema, 'mq'>) => ({
      redeliveries: eb
        .case()
        .when('state', '=', 'leased')
        .then(eb('redeliveries', '+', 1))
        .else(eb.ref('redeliveries'))
        .end(),
      state: 'leased',
      lease_until: now + leaseMs,
      leased_by: holder,
    });
  }

  /** Items a lease may take at `now`: ready ones due, and leased ones whose lease ended. */
  private static leasable(now: number) {
    return (w: ExpressionBuilder<SqlSchema, 'mq'>) => w.or([w.and([w('state', '=', 'ready'), w('available_at', '<=', now)]), w.and([w('state', '=', 'leased'), w('lease_until', '<=', now)])]);
  }

  /**
   * SQLite and Postgres: one statement picks the oldest leasable item and
   * leases it. On Postgres the pick locks its row and skips rows others hold
   * (FOR UPDATE SKIP LOCKED), so workers of several nodes lease different
   * items at once instead of waiting on the same one, and the lease's own
   * condition is checked again on the row it updates.
   */
  private async leaseOne(leaseMs: number, holder: string) {
    const now = this.now();
    return this.db()
      .updateTable('mq')
      .set(this.leaseSet(now, leaseMs, holder))
      .where('id', '=', (eb) => {
        const pick = eb.selectFrom('mq').select('id').where(SqlQueue.leasable(now)).orderBy('available_at').orderBy('enqueued_at').limit(1);
        return this.kind === 'postgres' ? pick.forUpdate().skipLocked() : pick;
      })
      .where(SqlQueue.leasable(now))
      .returning(['id', 'fn_id', 'call_json', 'body_bytes', 'attempts', 'max_attempts', 'redeliveries'])
      .executeTakeFirst();
  }

  /** MySQL (no UPDATE ... RETURNING, no subquery on the updated table): pick with SKIP LOCKED, lease and read in one transaction. */
  private async leaseMysql(leaseMs: number, holder: string) {
    const now = this.now();
    return this.db()
      .transaction()
      .execute(async (trx) => {
        const pick = await trx.selectFrom('mq').select('id').where(SqlQueue.leasable(now)).orderBy('available_at').orderBy('enqueued_at').limit(1).forUpdate().skipLocked().executeTakeFirst();
        if (!pick) return undefined;
        await trx
          .updateTable('mq')
          .set(this.leaseSet(now, leaseMs, holder))
          .where('id', '=', pick.id)
          .execute();
        return trx.selectFrom('mq').select(['id', 'fn_id', 'call_json', 'body_bytes', 'attempts', 'max_attempts', 'redeliveries']).where('id', '=', pick.id).executeTakeFirst();
      });
  }

  /** A body, a chunk per turn, into one buffer of its size. */
  private async readBody(id: string, bytes: number): Promise<Buffer> {
    const body = Buffer.allocUnsafe(bytes);
    let at = 0;
    for (let seq = 0; at < bytes; seq++) {
      if (seq > 0) await nextTurn();
      const row = await this.db().selectFrom('mq_bodies').select('chunk').where('id', '=', id).where('seq', '=', seq).executeTakeFirst();
      if (!row || at + row.chunk.length > bytes) throw new Error(`the queued body of call ${id} is damaged (chunk ${seq} ${row ? 'too long' : 'missing'})`);
      at += row.chunk.copy(body, at);
    }
    return body;
  }

  async releaseDead(isDead: (holder: string) => boolean): Promise<number> {
    const holders = await this.db().selectFrom('mq').select('leased_by').distinct().where('state', '=', 'leased').execute();
    let released = 0;
    for (const { leased_by: holder } of holders) {
      if (holder === null || !isDead(holder)) continue;
      const res = await this.db()
        .updateTable('mq')
        .set((eb) => ({ state: 'ready', lease_until: 0, leased_by: null, redeliveries: eb('redeliveries', '+', 1) }))
        .where('state', '=', 'leased')
        .where('leased_by', '=', holder)
        .executeTakeFirst();
      released += Number(res.numUpdatedRows);
    }
    return released;
  }

  async extend(id: string, leaseMs: number): Promise<void> {
    await this.db()
      .updateTable('mq')
      .set({ lease_until: this.now() + leaseMs })
      .where('id', '=', id)
      .where('state', '=', 'leased')
      .execute();
  }

  async ack(id: string): Promise<void> {
    // The item first: a body without its item is a leftover pruneDead removes; an item without its body could not run.
    await this.db().deleteFrom('mq').where('id', '=', id).execute();
    await this.db().deleteFrom('mq_bodies').where('id', '=', id).execute();
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
      .set((eb) => ({ state: 'dead', reason, attempts: eb('attempts', '+', 1), lease_until: 0, leased_by: null, dead_at: this.now() }))
      .where('id', '=', id)
      .execute();
  }

  async pruneDead(before: number): Promise<number> {
    const dead = await this.db().selectFrom('mq').select('id').where('state', '=', 'dead').where('dead_at', '<', before).execute();
    let removed = 0;
    for (let i = 0; i < dead.length; i += IDS_PER_QUERY) {
      const ids = dead.slice(i, i + IDS_PER_QUERY).map((r) => r.id);
      const res = await this.db().deleteFrom('mq').where('id', 'in', ids).where('state', '=', 'dead').executeTakeFirst();
      removed += Number(res.numDeletedRows);
      await this.db().deleteFrom('mq_bodies').where('id', 'in', ids).execute();
    }
    // Bodies of enqueues that never finished.
    await this.db()
      .deleteFrom('mq_bodies')
      .where('created_at', '<', this.now() - ORPHAN_BODY_MS)
      .where(({ not, exists, selectFrom }) => not(exists(selectFrom('mq').select('mq.id').whereRef('mq.id', '=', 'mq_bodies.id'))))
      .execute();
    return removed;
  }

  async has(ids: readonly string[]): Promise<Set<string>> {
    const held = new Set<string>();
    for (let i = 0; i < ids.length; i += IDS_PER_QUERY) {
      const rows = await this.db()
        .selectFrom('mq')
        .select('id')
        .where('id', 'in', ids.slice(i, i + IDS_PER_QUERY))
        .execute();
      for (const r of rows) held.add(r.id);
    }
    return held;
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
