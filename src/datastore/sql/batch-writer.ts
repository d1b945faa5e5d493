/**
 * Call records and logs on a database server (Postgres, MySQL): each batch
 * one transaction of multi-row upserts (a few statements for a thousand
 * records; a batch of one statement goes without BEGIN and COMMIT), over the pool, so the event loop only waits on the network.
 * Same meaning as SQLite's writer (sqlite-writer.ts): a record replaces an
 * earlier one of its id and keeps the log stored with it; a log whose
 * record is not stored yet waits in a `running` placeholder.
 *
 * Pruning is done by one node at a time: a node that finds another
 * pruning (the database's lock is taken) skips this round.
 */
import { sql, type Kysely, type Transaction } from 'kysely';
import type { CallLogEntry } from '../calls.js';
import type { BatchWriter } from './calls.js';
import { callRows, placeholderRow } from './call-rows.js';
import type { CallsTable, Schema } from './schema.js';

/** Rows per statement, and bytes of documents per statement (MySQL's max_allowed_packet is 16 MiB by default). */
const ROWS_PER_STATEMENT = 500;
const BYTES_PER_STATEMENT = 4 * 1024 * 1024;
/** The lock pruning runs under (Postgres: an advisory lock key; MySQL: GET_LOCK's name). */
const PRUNE_LOCK_PG = 0x666e7473_01n;
const PRUNE_LOCK_MYSQL = 'fnts.calls.prune';

/** Rows in statements of at most ROWS_PER_STATEMENT rows and about BYTES_PER_STATEMENT bytes. */
function* statements(rows: readonly CallsTable[]): Generator<CallsTable[]> {
  let batch: CallsTable[] = [];
  let bytes = 0;
  for (const row of rows) {
    const size = row.record.length + (row.log?.length ?? 0);
    if (batch.length > 0 && (batch.length >= ROWS_PER_STATEMENT || bytes + size > BYTES_PER_STATEMENT)) {
      yield batch;
      batch = [];
      bytes = 0;
    }
    batch.push(row);
    bytes += size;
  }
  if (batch.length > 0) yield batch;
}

async function upsert(trx: Kysely<Schema>, kind: 'postgres' | 'mysql', rows: CallsTable[]): Promise<void> {
  const insert = trx.insertInto('calls').values(rows);
  if (kind === 'postgres') {
    await insert
      .onConflict((oc) =>
        oc.column('id').doUpdateSet({
          status: (eb) => eb.ref('excluded.status'),
          record: (eb) => eb.ref('excluded.record'),
          log: sql<string | null>`coalesce(excluded.log, calls.log)`,
        }),
      )
      .execute();
  } else {
    await insert.onDuplicateKeyUpdate({ status: sql`values(status)`, record: sql`values(record)`, log: sql`coalesce(values(log), log)` }).execute();
  }
}

async function placeLog(trx: Transaction<Schema>, kind: 'postgres' | 'mysql', log: CallLogEntry): Promise<void> {
  const set = await trx.updateTable('calls').set({ log: log.log }).where('id', '=', log.callId).executeTakeFirst();
  if (Number(set.numUpdatedRows) > 0) return;
  const insert = trx.insertInto('calls').values(placeholderRow(log));
  if (kind === 'postgres') await insert.onConflict((oc) => oc.column('id').doUpdateSet({ log: (eb) => eb.ref('excluded.log') })).execute();
  else await insert.onDuplicateKeyUpdate({ log: sql`values(log)` }).execute();
}

async function pruneIn(db: Kysely<Schema> | Transaction<Schema>, before: string, perFn: number): Promise<number> {
  let removed = Number((await db.deleteFrom('calls').where('created_at', '<', before).executeTakeFirst()).numDeletedRows);
  const crowded = await db
    .selectFrom('calls')
    .select('fn_id')
    .groupBy('fn_id')
    .having((eb) => eb.fn.countAll(), '>', perFn)
    .execute();
  for (const { fn_id } of crowded) {
    const edge = await db
      .selectFrom('calls')
      .select(['created_at', 'id'])
      .where('fn_id', '=', fn_id)
      .orderBy('created_at', 'desc')
      .orderBy('id', 'desc')
      .limit(1)
      .offset(perFn - 1)
      .executeTakeFirst();
    if (!edge) continue;
    const res = await db
      .deleteFrom('calls')
      .where('fn_id', '=', fn_id)
      .where((eb) => eb.or([eb('created_at', '<', edge.created_at), eb.and([eb('created_at', '=', edge.created_at), eb('id', '<', edge.id)])]))
      .executeTakeFirst();
    removed += Number(res.numDeletedRows);
  }
  return removed;
}

/** The batch writer of a database server's datastore. */
export function serverWriter(db: () => Kysely<Schema>, kind: 'postgres' | 'mysql'): BatchWriter {
  return {
    async write(records, logs) {
      const { rows, alone } = callRows(records, logs);
      const batches = [...statements(rows)];
      // One statement is atomic by itself: no BEGIN and COMMIT round trips around it.
      if (batches.length === 1 && alone.length === 0) return upsert(db(), kind, batches[0]!);
      await db()
        .transaction()
        .execute(async (trx) => {
          for (const batch of batches) await upsert(trx, kind, batch);
          for (const log of alone) await placeLog(trx, kind, log);
        });
    },
    async prune(before, perFn) {
      if (kind === 'postgres') {
        return db()
          .transaction()
          .execute(async (trx) => {
            const { rows } = await sql<{ got: boolean }>`select pg_try_advisory_xact_lock(${sql.lit(PRUNE_LOCK_PG)}) as got`.execute(trx);
            return rows[0]?.got ? pruneIn(trx, before, perFn) : 0;
          });
      }
      // MySQL: GET_LOCK belongs to the connection, so lock, prune and release on one.
      return db()
        .connection()
        .execute(async (conn) => {
          const { rows } = await sql<{ got: number | null }>`select get_lock(${PRUNE_LOCK_MYSQL}, 0) as got`.execute(conn);
          if (Number(rows[0]?.got) !== 1) return 0;
          try {
            return await pruneIn(conn, before, perFn);
          } finally {
            await sql`select release_lock(${PRUNE_LOCK_MYSQL})`.execute(conn);
          }
        });
    },
    async close() {},
  };
}
