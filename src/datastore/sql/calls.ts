/**
 * SqlCallStore: call records and logs in the datastore's own database (the
 * embedded SQLite file needs nothing more set up): read through Kysely,
 * written and pruned in batches by the database's BatchWriter. A call's log
 * is a column of its record's row: one row per call.
 */
import type { Kysely } from 'kysely';
import { ApiError, E, type CallRecord } from '../../models/index.js';
import type { CallFilter, CallLogEntry, CallStore } from '../calls.js';
import { decodeCursor } from '../cursor.js';
import { GroupCommit } from '../group-commit.js';
import type { Page } from '../datastore.js';
import { failsEveryWrite, type DiskWatch } from '../storage.js';
import { limitOf, toPage } from './paging.js';
import type { Schema } from './schema.js';

/**
 * How a database writes batches of call records (as JSON) and logs, each
 * batch one transaction, and prunes them: they come by the thousand per
 * second, so each database does it its own fast way, off the event loop
 * where it can (SQLite: sqlite-writer.ts).
 */
export interface BatchWriter {
  /** A log lands on its call's row (its app and creation time make a placeholder row when the record is not stored yet). */
  write(records: readonly string[], logs: readonly CallLogEntry[]): Promise<void>;
  /** Removes records created before `before` and beyond the newest `perFn` of each fn; resolves with how many. */
  prune(before: string, perFn: number): Promise<number>;
  /** Finishes the batches in flight and releases the writer. Idempotent. */
  close(): Promise<void>;
}

/** One caller's share of a group commit (insertSerialized). */
interface Part {
  readonly records: readonly string[];
  readonly logs: readonly CallLogEntry[];
}

export class SqlCallStore implements CallStore {
  /**
   * Group commit: writes that come while one is with the writer wait for
   * it, then go together as the next batch (one transaction); each caller's
   * promise settles once the batch it joined is stored. A detached call's
   * record (its caller waits for it before the 202) no longer costs a
   * transaction of its own when many come at once. A batch the database
   * refuses is tried again part by part, so that one caller's bad record
   * fails no other's; a full disk or a database that does not answer fails
   * them all at once (trying each would only fail again).
   */
  private readonly batches = new GroupCommit<Part, void>({
    write: async (parts) => {
      await this.disk.write(() =>
        this.writer.write(
          parts.flatMap((p) => p.records),
          parts.flatMap((p) => p.logs),
        ),
      );
      return parts.map(() => undefined);
    },
    // As many as came: the batch writer splits what it writes into statements of its own size.
    maxItems: Number.POSITIVE_INFINITY,
    sharedFailure: failsEveryWrite,
  });

  constructor(
    private readonly db: () => Kysely<Schema>,
    private readonly writer: BatchWriter,
    /** The database's disk: a batch it has no room for throws StorageFullError, and nothing of it is stored. */
    private readonly disk: DiskWatch,
  ) {}

  async insert(records: readonly CallRecord[], logs: readonly CallLogEntry[] = []): Promise<void> {
    return this.insertSerialized(
      records.map((r) => JSON.stringify(r)),
      logs,
    );
  }

  /** Stores records already serialized (and logs), in the next group commit (see batches). */
  async insertSerialized(records: readonly string[], logs: readonly CallLogEntry[] = []): Promise<void> {
    if (records.length === 0 && logs.length === 0) return;
    this.db(); // throws once closed
    return this.batches.submit({ records, logs });
  }

  /** Finishes writes in flight (the batch writer's). */
  async close(): Promise<void> {
    await this.batches.settled();
    await this.writer.close();
  }

  async getCall(fnId: string, callId: string): Promise<CallRecord> {
    const row = await this.db().selectFrom('calls').select('record').where('id', '=', callId).where('fn_id', '=', fnId).executeTakeFirst();
    if (!row) throw new ApiError(E.CallNotFound);
    return JSON.parse(row.record) as CallRecord;
  }

  async listCalls(filter: CallFilter): Promise<Page<CallRecord>> {
    let query = this.db().selectFrom('calls').select(['id', 'created_at', 'record']).where('fn_id', '=', filter.fnId);
    if (filter.fromTime) query = query.where('created_at', '>=', filter.fromTime);
    if (filter.toTime) query = query.where('created_at', '<=', filter.toTime);
    if (filter.cursor) {
      const [createdAt = '', id = ''] = decodeCursor('calls', filter.cursor);
      query = query.where((eb) => eb.or([eb('created_at', '<', createdAt), eb.and([eb('created_at', '=', createdAt), eb('id', '<', id)])]));
    }
    const rows = await query.orderBy('created_at', 'desc').orderBy('id', 'desc').limit(limitOf(filter)).execute();
    return toPage(
      rows,
      limitOf(filter) - 1,
      (r) => JSON.parse(r.record) as CallRecord,
      'calls',
      (r) => [r.created_at, r.id],
    );
  }

  async getLog(fnId: string, callId: string): Promise<string> {
    const row = await this.db().selectFrom('calls').select('log').where('id', '=', callId).where('fn_id', '=', fnId).executeTakeFirst();
    if (row?.log == null) throw new ApiError(E.CallLogNotFound);
    return row.log;
  }

  async queuedBefore(before: string, limit: number, after?: { readonly createdAt: string; readonly id: string }): Promise<CallRecord[]> {
    let query = this.db().selectFrom('calls').select('record').where('status', '=', 'queued').where('created_at', '<', before);
    if (after) query = query.where((eb) => eb.or([eb('created_at', '>', after.createdAt), eb.and([eb('created_at', '=', after.createdAt), eb('id', '>', after.id)])]));
    const rows = await query.orderBy('created_at').orderBy('id').limit(limit).execute();
    return rows.map((r) => JSON.parse(r.record) as CallRecord);
  }

  async replaceQueued(records: readonly CallRecord[]): Promise<number> {
    if (records.length === 0) return 0;
    return this.db()
      .transaction()
      .execute(async (trx) => {
        let replaced = 0;
        for (const r of records) {
          const res = await trx
            .updateTable('calls')
            .set({ status: r.status, record: JSON.stringify(r) })
            .where('id', '=', r.id)
            .where('status', '=', 'queued')
            .executeTakeFirst();
          replaced += Number(res.numUpdatedRows);
        }
        return replaced;
      });
  }

  async prune(before: string, perFn: number): Promise<number> {
    this.db();
    return this.disk.write(() => this.writer.prune(before, perFn));
  }
}
