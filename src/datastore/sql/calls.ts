/**
 * SqlCallStore: call records and logs in the datastore's own database (the
 * embedded SQLite file needs nothing more set up): read through Kysely,
 * written in batches by the database's BatchWriter.
 */
import type { Kysely } from 'kysely';
import { ApiError, E, type CallRecord } from '../../models/index.js';
import type { CallFilter, CallLogEntry, CallStore } from '../calls.js';
import { decodeCursor } from '../cursor.js';
import type { Page } from '../datastore.js';
import { limitOf, toPage } from './paging.js';
import type { CallLogsTable, CallsTable, Schema } from './schema.js';

/**
 * How a database writes batches of call records and logs, each batch one
 * transaction: they come by the thousand per second, so each database does
 * it its own fast way (SQLite: sqlite-writer.ts).
 */
export interface BatchWriter {
  calls(rows: readonly CallsTable[]): Promise<void>;
  logs(rows: readonly CallLogsTable[]): Promise<void>;
  /** Finishes the batches in flight and releases the writer. Idempotent. */
  close(): Promise<void>;
}

const callRow = (r: CallRecord): CallsTable => ({
  id: r.id,
  fn_id: r.fn_id,
  app_id: r.app_id,
  status: r.status,
  created_at: r.created_at,
  record: JSON.stringify(r),
});

export class SqlCallStore implements CallStore {
  constructor(
    private readonly db: () => Kysely<Schema>,
    private readonly writer: BatchWriter,
  ) {}

  async insertCalls(records: readonly CallRecord[]): Promise<void> {
    if (records.length === 0) return;
    this.db(); // throws once closed
    return this.writer.calls(records.map(callRow));
  }

  async insertLogs(logs: readonly CallLogEntry[]): Promise<void> {
    if (logs.length === 0) return;
    this.db();
    return this.writer.logs(logs.map((l) => ({ call_id: l.callId, fn_id: l.fnId, log: l.log })));
  }

  /** Finishes writes in flight (the batch writer's). */
  async close(): Promise<void> {
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
    return toPage(rows, limitOf(filter) - 1, (r) => JSON.parse(r.record) as CallRecord, 'calls', (r) => [r.created_at, r.id]);
  }

  async getLog(fnId: string, callId: string): Promise<string> {
    const row = await this.db().selectFrom('call_logs').select('log').where('call_id', '=', callId).where('fn_id', '=', fnId).executeTakeFirst();
    if (!row) throw new ApiError(E.CallLogNotFound);
    return row.log;
  }

  async prune(before: string, perFn: number): Promise<number> {
    return this.db()
      .transaction()
      .execute(async (trx) => {
        let removed = Number((await trx.deleteFrom('calls').where('created_at', '<', before).executeTakeFirst()).numDeletedRows);
        const crowded = await trx
          .selectFrom('calls')
          .select(['fn_id', (eb) => eb.fn.countAll<number>().as('n')])
          .groupBy('fn_id')
          .having((eb) => eb.fn.countAll(), '>', perFn)
          .execute();
        for (const { fn_id } of crowded) {
          // The oldest record still kept: everything older goes.
          const edge = await trx
            .selectFrom('calls')
            .select(['created_at', 'id'])
            .where('fn_id', '=', fn_id)
            .orderBy('created_at', 'desc')
            .orderBy('id', 'desc')
            .offset(perFn - 1)
            .limit(1)
            .executeTakeFirst();
          if (!edge) continue;
          const res = await trx
            .deleteFrom('calls')
            .where('fn_id', '=', fn_id)
            .where((eb) => eb.or([eb('created_at', '<', edge.created_at), eb.and([eb('created_at', '=', edge.created_at), eb('id', '<', edge.id)])]))
            .executeTakeFirst();
          removed += Number(res.numDeletedRows);
        }
        // Logs of records that are gone.
        await trx
          .deleteFrom('call_logs')
          .where(({ not, exists, selectFrom }) => not(exists(selectFrom('calls').select('id').whereRef('calls.id', '=', 'call_logs.call_id'))))
          .execute();
        return removed;
      });
  }
}
