/**
 * The queue of detached calls in a Postgres or MySQL database (the
 * server's own, FN_DB_URL); on a SQLite file the writer thread runs it
 * (sqlite.ts), and this one serves SQLite only in tests. Servers sharing the
 * database never lease one item twice, and a lease taken back is counted
 * (redeliveries) in the statement that takes it.
 *
 * A call's body of up to SMALL_BODY_BYTES (most: a JSON document) is kept
 * in its item's row (small_body); a larger one lives apart (mq_bodies), in
 * chunks of BODY_CHUNK_BYTES, written once when it is queued and read once
 * when it is leased: the item's row, updated at every lease, retry and
 * extension, stays small.
 *
 *   enqueue:  group commit: the calls that come while a group is being written
 *             go together as the next one: idempotency keys checked, bodies and
 *             items inserted many rows a statement, one transaction (a group
 *             with no key and no large body: one statement)
 *   reserve:  up to n items leased in one statement (Postgres: FOR UPDATE SKIP
 *             LOCKED; MySQL: pick, lease and read in one transaction, two round
 *             trips), picked in index order (MySQL: from where the last pick
 *             ended while a backlog lasts, see ReadyCursor), their bodies read
 *             in one query
 *   ack:      group commit as enqueue: the items of the calls acknowledged together
 *             and their bodies removed in one statement (MySQL: two, the items
 *             first, in one round trip)
 *   prune:    item, then its body
 *
 * A body no item refers to (an enqueue cut short by a crash) is removed by
 * pruneDead once ORPHAN_BODY_MS old.
 */
import { sql, type ExpressionBuilder, type Kysely, type RawBuilder, type Transaction } from 'kysely';
import { failsEveryWrite, GroupCommit, kindOf, type SqlKind, type SqlSchema, type Statement, type StatementBatches, type StatementResult } from '../datastore/index.js';
import { IDEMPOTENCY_WINDOW_MS, type Queue, type QueuedCall } from './queue.js';
import { bodyChunks, ORPHAN_BODY_MS } from './sqlite-program.js';

/** Ids per `IN (...)` list: well under every database's limit on bound parameters. */
const IDS_PER_QUERY = 500;
/** Calls per group commit, and body bytes per group (MariaDB refuses statements over 16 MiB by default): more wait for the next. */
const GROUP_CALLS = 500;
const GROUP_BYTES = 4 * 1024 * 1024;
/** How long acknowledgements gather before they are written: a backlog drained at 500 calls/s removes them about 10 at a time. */
const ACK_LINGER_MS = 20;
/** Items queued, at least, before Postgres is asked to renew mq's statistics (see noteQueued). */
const STATS_GROWTH = 1000;
/**
 * Bodies up to this size are kept in their item's row (Postgres and MySQL):
 * one table written when a call is queued, read when it is leased and
 * removed when it is acknowledged, where mq_bodies was a second each time.
 * On MySQL a group of such calls is one INSERT (no transaction: four round
 * trips were BEGIN, two INSERTs, COMMIT). Well under the size at which
 * either database moves a value out of the row (Postgres TOASTs values of a
 * row over ~2 KB; InnoDB moves long columns off the page), so a lease
 * rewrites no more than it did.
 */
const SMALL_BODY_BYTES = 1024;
/** Rows per INSERT statement (15 columns each at most: well within bound-parameter limits). */
const ROWS_PER_INSERT = 500;

/** How long ready picks may start where the last one ended (see ReadyCursor) before one starts from the oldest item again. */
const READY_RESCAN_MS = 1000;
/**
 * MySQL: while a backlog lasts (ready picks come back full), lapsed leases
 * are looked for this often rather than at every lease: a pick is a round
 * trip of its own, one in six of a lease's, and a lapsed lease is rare (its
 * holder died, or its call outlived it), waiting a second more at most.
 */
const LAPSED_PICK_EVERY_MS = 1000;
/**
 * MySQL: the ready items a lease of n reads as candidates, n times this:
 * the leases under way at once (three while a backlog lasts, others'
 * servers' too) each skip the rows the others hold, and still find theirs.
 */
const READY_CANDIDATES_PER_CALL = 4;

type NewItem = Omit<QueuedCall, 'attempts' | 'redeliveries'>;

/**
 * Where MySQL's pick of ready items starts while a backlog lasts. A lease
 * moves its items out of `ready`, and InnoDB keeps their old entries in the
 * state index, marked, until its purge reaches them (about a second behind
 * a drain): the oldest entries of `ready`, exactly where a pick in age
 * order starts. Read from the beginning, every pick walked them (1,009
 * pages a pick of 16 in a drain's slow log, the largest share of the
 * database's time a call). So while picks come back full, the next starts
 * at the age of the last item the one before leased. An item ready behind
 * that point (queued by a write that began earlier and committed later, by
 * another server, or released by a dead holder) waits for a pick from the
 * beginning: after any pick that came back short (the backlog is gone) and
 * at least every READY_RESCAN_MS. Order and latency only: no item is ever
 * left behind.
 */
class ReadyCursor {
  /** The age (available_at) the next pick may start at; undefined: from the beginning. */
  private from: number | undefined;
  /** When a pick last started from the beginning. */
  private rescannedAt = -Infinity;

  /** Where a pick at `now` starts (undefined: the oldest item). */
  start(now: number): number | undefined {
    return now - this.rescannedAt < READY_RESCAN_MS ? this.from : undefined;
  }

  /** A pick that started at `from` came back: `last`, the age of the last item it leased when it leased all it asked, else undefined. */
  picked(now: number, from: number | undefined, last: number | undefined): void {
    if (from === undefined) this.rescannedAt = now;
    // Leases run at once: the furthest full pick counts, and a short one sends the next to the beginning.
    this.from = last === undefined ? undefined : Math.max(last, this.from ?? last);
  }
}

/** One caller's enqueue in a group commit. */
interface Part {
  readonly item: NewItem;
  readonly key: string | undefined;
}

/** A lease being taken: when, for how long (per fn, where `byFn` says), by whom. */
interface Lease {
  readonly now: number;
  readonly ms: number;
  readonly byFn: ReadonlyMap<string, number> | undefined;
  readonly holder: string;
}

/** The columns a lease answers with. */
const LEASED = ['id', 'fn_id', 'call_json', 'body_bytes', 'attempts', 'max_attempts', 'redeliveries', 'available_at', 'enqueued_at'] as const;
type LeasedRow = Pick<SqlSchema['mq'], (typeof LEASED)[number]>;
/** What a lease reads where the database does not join the body itself (MySQL, SQLite in tests): the columns and the item's own body. */
const LEASED_WITH_SMALL_BODY = [...LEASED, 'small_body'] as const;

/**
 * The end of a leased item's lease as SQL text: its fn's own time when
 * `byFn` names the fn, else `ms` (each number followed by `cast`: Postgres
 * types a parameter by it).
 */
function leaseEndSql(now: number, ms: number, byFn: ReadonlyMap<string, number> | undefined, cast: RawBuilder<unknown>): RawBuilder<number> {
  if (!byFn || byFn.size === 0) return sql<number>`${now + ms}${cast}`;
  const whens = [...byFn].map(([fnId, fnMs]) => sql`when ${fnId} then ${now + fnMs}${cast}`);
  return sql<number>`case fn_id ${sql.join(whens, sql` `)} else ${now + ms}${cast} end`;
}

export class SqlQueue implements Queue {
  /** Which database the queue is in: how an item is leased differs (see reserve). */
  private readonly kind: SqlKind;
  /** Items queued since mq's statistics were last renewed, how many it held then (about), and the ANALYZE running (see noteQueued). */
  private queuedSinceStats = 0;
  private rowsAtStats = 0;
  private analyzing: Promise<void> | undefined;
  /** Where MySQL's ready picks start while a backlog lasts. */
  private readonly readyCursor = new ReadyCursor();
  /** When MySQL's lease last looked for lapsed leases (the queue's clock; see LAPSED_PICK_EVERY_MS). */
  private lapsedPickedAt = -Infinity;

  constructor(
    private readonly db: () => Kysely<SqlSchema>,
    private readonly now: () => number = Date.now,
    /** MySQL: its statements sent several to a round trip (the lease, acknowledgements); throws once the datastore is closed. Unused elsewhere. */
    private readonly batches?: () => StatementBatches | undefined,
  ) {
    this.kind = kindOf(db());
  }

  /** Enqueues, written a group at a time (see the top of the file). */
  private readonly enqueues = new GroupCommit<Part, string>({
    write: async (parts) => {
      const ids = await this.write(parts);
      this.noteQueued(parts.length);
      return ids;
    },
    maxItems: GROUP_CALLS,
    maxBytes: GROUP_BYTES,
    bytesOf: (p) => p.item.body.length,
    sharedFailure: failsEveryWrite,
  });
  /** Acknowledgements of calls that ended together: one statement for their items, one for their bodies. */
  private readonly acks = new GroupCommit<string, void>({
    write: async (ids) => {
      await this.drop(ids);
      // The table is smaller than it was at the last ANALYZE: the next backlog is looked at sooner (see noteQueued).
      this.rowsAtStats = Math.max(0, this.rowsAtStats - ids.length);
      return ids.map(() => undefined);
    },
    maxItems: IDS_PER_QUERY,
    // Nobody waits on an ack but the worker settling its call: larger groups, fewer round trips.
    lingerMs: ACK_LINGER_MS,
    sharedFailure: failsEveryWrite,
  });

  async enqueue(item: NewItem, key?: string): Promise<string> {
    return this.enqueues.submit({ item, key });
  }

  /**
   * Postgres plans a lease by its statistics of mq, and a queue's table
   * changes faster than autovacuum looks (a minute apart by default): read
   * when the queue held a few items, they made it sort every ready item to
   * pick the oldest few (5-7 ms a lease, 0.6 ms of the database's CPU per
   * call drained, at 3,000 queued), where the index gives them in order. So
   * once as many items have been queued since its last ANALYZE as the table
   * then held, less those acknowledged since (and at least STATS_GROWTH), the
   * queue has it analyzed again in the background: a handful of times while
   * a backlog of 20,000 builds. Statistics that say more ready items than
   * there are do no harm (the index is used either way). Never throws: the
   * calls whose enqueue set it off are stored, whatever becomes of it.
   */
  private noteQueued(n: number): void {
    if (this.kind !== 'postgres') return;
    this.queuedSinceStats += n;
    if (this.analyzing || this.queuedSinceStats < Math.max(STATS_GROWTH, this.rowsAtStats)) return;
    const rows = this.rowsAtStats + this.queuedSinceStats;
    this.queuedSinceStats = 0;
    // Not awaited by the enqueue that set it off; close() waits for it. A failure (a closed datastore
    // included: db() throws) is left for the next.
    this.analyzing = (async () => {
      await sql`analyze mq`.execute(this.db());
      this.rowsAtStats = rows;
    })()
      .catch(() => undefined)
      .finally(() => (this.analyzing = undefined));
  }

  /** A body kept in its item's row (see SMALL_BODY_BYTES), else undefined: in mq_bodies (or none: empty). */
  private smallBody(body: Buffer): Buffer | undefined {
    return this.kind !== 'sqlite' && body.length > 0 && body.length <= SMALL_BODY_BYTES ? body : undefined;
  }

  /** The chunks of a body that is not kept in its item's row. */
  private chunksOf(item: NewItem): Array<{ seq: number; chunk: Buffer }> {
    return this.smallBody(item.body) ? [] : bodyChunks(item.body);
  }

  /**
   * One transaction: keys checked in order (a key twice in the group names
   * the first call), then the new calls' bodies and items, many rows a
   * statement. A group with no key in one statement (see insertAtOnce).
   */
  private async write(parts: readonly Part[]): Promise<string[]> {
    const at = this.now();
    if (this.kind !== 'sqlite' && parts.every((p) => p.key === undefined)) {
      const items = parts.map((p) => p.item);
      const chunks = items.flatMap((item) => this.chunksOf(item).map((c) => ({ id: item.id, ...c })));
      const atOnce = chunks.length <= ROWS_PER_INSERT && items.length <= ROWS_PER_INSERT && items.reduce((n, i) => n + i.body.length, 0) <= GROUP_BYTES;
      // MySQL has no data-modifying CTE: one statement only when every body is in its item's row.
      if (atOnce && (this.kind === 'postgres' || chunks.length === 0)) {
        await this.insertAtOnce(items, chunks, at);
        return items.map((i) => i.id);
      }
    }
    return this.db()
      .transaction()
      .execute(async (trx) => {
        const ids: string[] = [];
        const fresh: NewItem[] = [];
        const named = new Map<string, string>();
        for (const { item, key } of parts) {
          const earlier = key === undefined ? undefined : (named.get(`${item.fnId}\n${key}`) ?? (await this.keyed(trx, item, key, at)));
          if (earlier !== undefined) {
            ids.push(earlier);
            continue;
          }
          if (key !== undefined) named.set(`${item.fnId}\n${key}`, item.id);
          ids.push(item.id);
          fresh.push(item);
        }
        const chunks = fresh.flatMap((item) => this.chunksOf(item).map((c) => ({ id: item.id, ...c, created_at: at })));
        // Statements of at most ROWS_PER_INSERT rows and about GROUP_BYTES.
        for (let i = 0; i < chunks.length;) {
          let bytes = 0;
          let j = i;
          while (j < chunks.length && j - i < ROWS_PER_INSERT && (j === i || bytes + chunks[j]!.chunk.length <= GROUP_BYTES)) bytes += chunks[j++]!.chunk.length;
          await trx.insertInto('mq_bodies').values(chunks.slice(i, j)).execute();
          i = j;
        }
        for (let i = 0; i < fresh.length; i += ROWS_PER_INSERT) {
          const rows = fresh.slice(i, i + ROWS_PER_INSERT).map((item) => ({
            id: item.id,
            fn_id: item.fnId,
            call_json: item.callJson,
            body_bytes: item.body.length,
            small_body: this.smallBody(item.body) ?? null,
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
          }));
          await trx.insertInto('mq').values(rows).execute();
        }
        return ids;
      });
  }

  /**
   * A group with no idempotency key (most): bodies and items in one
   * statement, atomic by itself, where the transaction was four round trips
   * (BEGIN, two INSERTs, COMMIT) each a syscall and a wake-up of the
   * database; on MySQL only when no body needs mq_bodies. SQL text, not
   * built: the builder took longer than the rest.
   */
  private async insertAtOnce(items: readonly NewItem[], chunks: ReadonlyArray<{ id: string; seq: number; chunk: Buffer }>, at: number): Promise<void> {
    const rows = sql.join(items.map((i) => sql`(${i.id}, ${i.fnId}, ${i.callJson}, ${i.body.length}, ${this.smallBody(i.body) ?? null}, 0, ${i.maxAttempts}, 'ready', ${at}, ${at}, 0, 0)`));
    const into = sql`insert into mq (id, fn_id, call_json, body_bytes, small_body, attempts, max_attempts, state, enqueued_at, available_at, lease_until, redeliveries) values ${rows}`;
    if (chunks.length === 0) {
      await into.execute(this.db());
      return;
    }
    const bodies = sql.join(chunks.map((c) => sql`(${c.id}, ${c.seq}, ${c.chunk}, ${at})`));
    await sql`with bodies as (insert into mq_bodies (id, seq, chunk, created_at) values ${bodies}) ${into}`.execute(this.db());
  }

  /** The call `key` names for `item`'s fn within the window, else undefined once the key names `item` (in `trx`). */
  private async keyed(trx: Transaction<SqlSchema>, item: NewItem, key: string, at: number): Promise<string | undefined> {
    const earlier = await trx.selectFrom('mq_keys').select(['call_id', 'created_at']).where('fn_id', '=', item.fnId).where('key', '=', key).executeTakeFirst();
    if (earlier && Number(earlier.created_at) > at - IDEMPOTENCY_WINDOW_MS) return earlier.call_id;
    const insert = trx.insertInto('mq_keys').values({ fn_id: item.fnId, key, call_id: item.id, created_at: at });
    await (
      this.kind === 'mysql'
        ? insert.onDuplicateKeyUpdate({ call_id: item.id, created_at: at })
        : insert.onConflict((oc) => oc.columns(['fn_id', 'key']).doUpdateSet({ call_id: item.id, created_at: at }))
    ).execute();
    return undefined;
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
    return (await this.reserveBatch(1, leaseMs, holder))[0];
  }

  /**
   * Lapsed leases first (their holders died), then the oldest ready items.
   * Postgres: one statement leases them and reads their bodies; MySQL (and
   * SQLite in tests): the lease, then the bodies in one query.
   */
  async reserveBatch(max: number, leaseMs: number, holder: string, leaseByFn?: ReadonlyMap<string, number>): Promise<QueuedCall[]> {
    if (max <= 0) return [];
    const lease: Lease = { now: this.now(), ms: leaseMs, byFn: leaseByFn, holder };
    const byAge = (a: LeasedRow, b: LeasedRow): number => Number(a.available_at) - Number(b.available_at) || Number(a.enqueued_at) - Number(b.enqueued_at);
    const called = (r: LeasedRow, body: Buffer): QueuedCall => ({
      id: r.id,
      fnId: r.fn_id,
      callJson: r.call_json,
      body,
      attempts: r.attempts,
      maxAttempts: r.max_attempts,
      redeliveries: r.redeliveries,
    });
    if (this.kind === 'postgres') return (await this.leasePostgres(max, lease)).sort(byAge).map((r) => called(r, SqlQueue.wholeBody(r, r.body)));
    const rows = this.kind === 'mysql' ? await this.leaseMysql(max, lease) : await this.leaseMany(max, lease);
    rows.sort(byAge);
    const bodies = await this.readBodies(rows.filter((r) => r.small_body === null).map((r) => ({ id: r.id, bytes: Number(r.body_bytes) })));
    return rows.map((r) => called(r, r.small_body === null ? bodies.get(r.id)! : SqlQueue.wholeBody(r, r.small_body)));
  }

  /**
   * Postgres: the lease and the bodies in one statement (a round trip and
   * one statement to plan, where a lease was three: lapsed items, ready
   * ones, their bodies). Each pick is an array evaluated once (an `IN
   * (subquery)` with SKIP LOCKED may run as often as the plan likes, and
   * pick other rows each time): lapsed items first, then ready ones, the
   * first `max` of both leased; the lease's own condition is checked again
   * on each row it updates, written as a CASE so that the plan finds the
   * rows by their ids (an OR of the state index's conditions was planned as
   * a scan of every ready item, at every lease). Written as SQL text, not
   * built: building the two UPDATEs took ~200 µs of the event loop a lease.
   * A body is the item's own (small_body), or its chunks joined in order by
   * the database.
   */
  private async leasePostgres(max: number, { now, ms, byFn, holder }: Lease): Promise<Array<LeasedRow & { body: Buffer | null }>> {
    const until = leaseEndSql(now, ms, byFn, sql`::bigint`);
    // Each pick in its index's order: lapsed leases by when they ended (mq_lapsed_idx), ready items by age.
    const pick = (state: 'leased' | 'ready'): RawBuilder<unknown> =>
      state === 'leased'
        ? sql`array(select id from mq where state = 'leased' and lease_until <= ${now} order by lease_until limit ${max} for update skip locked)`
        : sql`array(select id from mq where state = 'ready' and available_at <= ${now} order by available_at, enqueued_at limit ${max} for update skip locked)`;
    const { rows } = await sql<LeasedRow & { body: Buffer | null }>`
      with leased as (
        update mq set
          redeliveries = case when state = 'leased' then redeliveries + 1 else redeliveries end,
          state = 'leased', lease_until = ${until}, leased_by = ${holder}
        where id = any((${pick('leased')} || ${pick('ready')})[1:${max}::int])
          and case state when 'ready' then available_at <= ${now} when 'leased' then lease_until <= ${now} else false end
        returning ${sql.join(LEASED.map((c) => sql.ref(c)))}, small_body
      )
      select ${sql.join(LEASED.map((c) => sql.ref(`leased.${c}`)))},
        coalesce(leased.small_body, (select string_agg(chunk, ''::bytea order by seq) from mq_bodies where mq_bodies.id = leased.id)) as body
      from leased`.execute(this.db());
    return rows;
  }

  /** A leased item's body as the database gave it (its own, or its chunks joined; null: none), checked against its size. */
  private static wholeBody(r: LeasedRow, given: Buffer | null): Buffer {
    const body = given ?? Buffer.alloc(0);
    if (body.length !== Number(r.body_bytes)) throw new Error(`the queued body of call ${r.id} is damaged (${body.length} of its ${Number(r.body_bytes)} bytes)`);
    return body;
  }

  /** What a lease sets: an item still `leased` is one whose lease ended, taken back and counted. */
  private leaseSet({ now, ms, byFn, holder }: Lease) {
    // redeliveries first: MySQL assigns left to right, each assignment seeing the ones before it.
    return (eb: ExpressionBuilder<SqlSchema, 'mq'>) => ({
      redeliveries: eb
        .case()
        .when('state', '=', 'leased')
        .then(eb('redeliveries', '+', 1))
        .else(eb.ref('redeliveries'))
        .end(),
      state: 'leased',
      lease_until: leaseEndSql(now, ms, byFn, sql``),
      leased_by: holder,
    });
  }

  /** Items a lease may take at `now`: ready ones due, and leased ones whose lease ended. */
  private static leasable(now: number) {
    return (w: ExpressionBuilder<SqlSchema, 'mq'>) => w.or([w.and([w('state', '=', 'ready'), w('available_at', '<=', now)]), w.and([w('state', '=', 'leased'), w('lease_until', '<=', now)])]);
  }

  /**
   * The ids a lease picks (Postgres, SQLite), in their index's order:
   * lapsed leases by when they ended (mq_lapsed_idx), or ready items due by
   * age (state, available_at, enqueued_at). MySQL's are in leaseMysql.
   */
  private pick(db: Kysely<SqlSchema>, lapsed: boolean, now: number, n: number) {
    const q = db
      .selectFrom('mq')
      .select('id')
      .where('state', '=', lapsed ? 'leased' : 'ready')
      .$call((w) => (lapsed ? w.where('lease_until', '<=', now).orderBy('lease_until') : w.where('available_at', '<=', now).orderBy('available_at').orderBy('enqueued_at')))
      .limit(n);
    // Rows others are leasing are skipped, not waited for (SQLite, in tests, has one writer at a time).
    return this.kind === 'sqlite' ? q : q.forUpdate().skipLocked();
  }

  /**
   * Postgres (and SQLite in tests): one UPDATE per kind of pick leases them;
   * the pick locks its rows and skips rows others hold, and the lease's own
   * condition is checked again on each row it updates.
   */
  private async leaseMany(max: number, lease: Lease) {
    const now = lease.now;
    const leaseSome = (lapsed: boolean, n: number) =>
      this.db()
        .updateTable('mq')
        .set(this.leaseSet(lease))
        // Postgres runs an `IN (subquery)` as often as its plan likes, and with SKIP LOCKED each run
        // picks other rows (more than n in all); an array of the pick is evaluated once.
        .where((eb) => {
          const ids = this.pick(this.db(), lapsed, now, n);
          return this.kind === 'postgres' ? eb('id', '=', eb.fn.any(sql<string[]>`array(${ids})`)) : eb('id', 'in', ids);
        })
        .where(SqlQueue.leasable(now))
        .returning(LEASED_WITH_SMALL_BODY)
        .execute();
    const lapsed = await leaseSome(true, max);
    return lapsed.length < max ? [...lapsed, ...(await leaseSome(false, max - lapsed.length))] : lapsed;
  }

  /**
   * MySQL (no UPDATE ... RETURNING, no subquery on the updated table): the
   * picks read the items whole with SKIP LOCKED (a locking read: the rows
   * are as committed, and stay so until this transaction ends), one UPDATE
   * leases them, in one transaction under READ COMMITTED (no gap locks:
   * under REPEATABLE READ, the default, the picks' next-key locks on the
   * state index deadlocked with another server's lease moving rows out of
   * `ready`, seen with six leases at once); what the UPDATE changed of the
   * columns read (redeliveries, for lapsed items) is applied to them here
   * rather than read again. Two round trips while a backlog lasts (see
   * StatementBatches): the isolation, BEGIN and the picks, then the UPDATE
   * and COMMIT; through Kysely the same was five, each a write to the
   * socket (~100-160 µs of the kernel's time on a loaded 2-core VM) and a
   * wake-up of the database.
   * The ready pick reads its candidates (READY_CANDIDATES_PER_CALL times
   * what it wants) by a plain read of the state index, then locks them
   * through the primary key, stopping once it holds enough (rows another
   * lease holds skipped, rows leased meanwhile read as they are now and
   * left). A locking read of the state index itself, under READ COMMITTED,
   * cost InnoDB a walk of its undo history for each row it locked (finding
   * whether the entry's last change was committed): in a drain, 50 pages
   * a pick just after the purge, growing to 4,600 before the next (2.3 ms
   * a pick at p50, 7 ms at p90, the largest share of the database's time a
   * drained call); through the primary key, 50 pages a pick throughout.
   * The lapsed ones are read from the newest back: InnoDB walks the entries
   * of removed items that its purge has not reached yet past the end of a
   * range, and every call acknowledged in the last minute lies just past
   * `lease_until <= now` (its lease would have ended soon after): read
   * forward, the pick walked them all at every lease (390 calls
   * acknowledged under an open read view: 788 pages read by a lease
   * forward, 6 backward; the contract test). When more leases have ended
   * than a lease takes, the rest come at the next. While a backlog lasts
   * they are looked for once a second (LAPSED_PICK_EVERY_MS), in the first
   * round trip; otherwise at every lease, in a round trip of their own once
   * the ready pick came back short. The ready pick starts where the cursor
   * says (see ReadyCursor).
   */
  private async leaseMysql(max: number, { now, ms, byFn, holder }: Lease): Promise<Array<LeasedRow & { small_body: Buffer | null }>> {
    type Row = LeasedRow & { small_body: Buffer | null };
    const columns = sql.join(LEASED_WITH_SMALL_BODY.map((c) => sql.ref(`mq.${c}`)));
    // Lapsed leases from the newest back; taken back, each counts a redelivery.
    const lapsedPick = (n: number) => sql`select ${columns} from mq where state = 'leased' and lease_until <= ${now} order by lease_until desc limit ${n} for update skip locked`;
    const lapsed = (rows: StatementResult | undefined): Row[] => (rows as Row[]).map((r) => ({ ...r, redeliveries: Number(r.redeliveries) + 1 }));
    const from = this.readyCursor.start(now);
    // The oldest ready items by a plain read of the state index, then locked through the primary key (see above).
    const readyPick = sql`select ${columns} from (
        select id from mq where state = 'ready' and available_at <= ${now} ${from === undefined ? sql`` : sql`and available_at >= ${from}`}
        order by available_at, enqueued_at limit ${max * READY_CANDIDATES_PER_CALL}
      ) picked straight_join mq on mq.id = picked.id where mq.state = 'ready' and mq.available_at <= ${now} limit ${max} for update skip locked`;
    const lapsedFirst = now - this.lapsedPickedAt >= LAPSED_PICK_EVERY_MS;
    if (lapsedFirst) this.lapsedPickedAt = now;
    return this.mysqlBatches().session(async (send) => {
      const picked = await send(this.statements(sql`set transaction isolation level read committed`, sql`start transaction`, ...(lapsedFirst ? [lapsedPick(max)] : []), readyPick));
      const rows: Row[] = lapsedFirst ? lapsed(picked[2]) : [];
      // The ready pick asked for `max` (sent before the lapsed ones were known): the first it needs are taken, the rest left.
      const want = max - rows.length;
      const ready = (picked.at(-1) as Row[]).slice(0, want);
      if (want > 0) this.readyCursor.picked(now, from, ready.length === want ? Math.max(...ready.map((r) => Number(r.available_at))) : undefined);
      rows.push(...ready);
      // No backlog (the ready pick came back short): lapsed leases are looked for at every lease.
      if (rows.length < max && !lapsedFirst) {
        this.lapsedPickedAt = now;
        rows.push(...lapsed((await send(this.statements(lapsedPick(max - rows.length))))[0]));
      }
      if (rows.length === 0) {
        await send(this.statements(sql`commit`));
        return [];
      }
      // redeliveries first: MySQL assigns left to right, each assignment seeing the ones before it.
      const lease = sql`
        update mq set
          redeliveries = case when state = 'leased' then redeliveries + 1 else redeliveries end,
          state = 'leased', lease_until = ${leaseEndSql(now, ms, byFn, sql``)}, leased_by = ${holder}
        where id in (${sql.join(rows.map((r) => r.id))})`;
      await send(this.statements(lease, sql`commit`));
      return rows;
    });
  }

  /** SQL text as MySQL's statement batches send it: compiled (its values as `?`), not built. */
  private statements(...queries: ReadonlyArray<RawBuilder<unknown>>): Statement[] {
    const db = this.db();
    return queries.map((q) => {
      const { sql: text, parameters } = q.compile(db);
      return { text, values: parameters };
    });
  }

  /** MySQL's statement batches (see leaseMysql). */
  private mysqlBatches(): StatementBatches {
    const batches = this.batches?.();
    if (!batches) throw new Error('the queue in a MySQL database needs its statement batches (SqlDatastore.statementBatches)');
    return batches;
  }

  /** The bodies of leased items, each in one buffer of its size, read in one query. */
  private async readBodies(items: ReadonlyArray<{ id: string; bytes: number }>): Promise<Map<string, Buffer>> {
    const bodies = new Map<string, { body: Buffer; at: number; seq: number }>();
    for (const { id, bytes } of items) bodies.set(id, { body: Buffer.allocUnsafe(bytes), at: 0, seq: 0 });
    const withBody = items.filter((i) => i.bytes > 0).map((i) => i.id);
    for (let i = 0; i < withBody.length; i += IDS_PER_QUERY) {
      const chunks = await this.db()
        .selectFrom('mq_bodies')
        .select(['id', 'seq', 'chunk'])
        .where('id', 'in', withBody.slice(i, i + IDS_PER_QUERY))
        .orderBy('id')
        .orderBy('seq')
        .execute();
      for (const { id, seq, chunk } of chunks) {
        const b = bodies.get(id)!;
        if (seq !== b.seq++ || b.at + chunk.length > b.body.length) throw new Error(`the queued body of call ${id} is damaged (chunk ${seq} out of place or too long)`);
        b.at += chunk.copy(b.body, b.at);
      }
    }
    const out = new Map<string, Buffer>();
    for (const [id, b] of bodies) {
      if (b.at !== b.body.length) throw new Error(`the queued body of call ${id} is damaged (${b.at} of its ${b.body.length} bytes)`);
      out.set(id, b.body);
    }
    return out;
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
    return this.acks.submit(id);
  }

  /**
   * Removes items and their bodies in one statement (atomic) on Postgres;
   * in two on MySQL (one round trip: its statement batches) and SQLite
   * (tests), the items first: a body without its item is a leftover
   * pruneDead removes, an item without its body could not run. MariaDB's
   * one statement for both (a multi-table DELETE joining the bodies) took
   * 2.9 ms of its engine's time for ~27 calls in its slow log; the two,
   * 0.9 ms together.
   */
  private async drop(ids: readonly string[]): Promise<void> {
    const db = this.db();
    if (this.kind === 'postgres') {
      const list = sql.join(ids.map((id) => sql.val(id)));
      await sql`with gone as (delete from mq where id in (${list})) delete from mq_bodies where id in (${list})`.execute(db);
    } else if (this.kind === 'mysql') {
      const list = sql.join(ids);
      await this.mysqlBatches().session((send) => send(this.statements(sql`delete from mq where id in (${list})`, sql`delete from mq_bodies where id in (${list})`)));
    } else {
      await db.deleteFrom('mq').where('id', 'in', ids).execute();
      await db.deleteFrom('mq_bodies').where('id', 'in', ids).execute();
    }
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
    // Keys past their window are of no use any more.
    await this.db()
      .deleteFrom('mq_keys')
      .where('created_at', '<=', this.now() - IDEMPOTENCY_WINDOW_MS)
      .execute();
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
  async close(): Promise<void> {
    await this.analyzing;
  }

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
