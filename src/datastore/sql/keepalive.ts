/**
 * SqlKeepAliveStore: each fn's keep-alive histogram (agent/keepalive.ts) in
 * the datastore's own database, table keepalive_histograms (migration
 * 0010). The agent writes changed ones at most once a minute, in one
 * transaction; a fn deleted meanwhile is skipped (its row goes with it).
 */
import type { Kysely } from 'kysely';
import type { DiskWatch } from '../storage.js';
import type { Schema } from './schema.js';

/** One fn's histogram as stored: what the agent gave, as it gave it (it validates what it loads). */
export interface HistogramRow {
  readonly fnId: string;
  readonly data: string;
}

export class SqlKeepAliveStore {
  constructor(
    private readonly db: () => Kysely<Schema>,
    private readonly disk: DiskWatch,
  ) {}

  async loadHistograms(): Promise<HistogramRow[]> {
    const rows = await this.db().selectFrom('keepalive_histograms').select(['fn_id', 'data']).execute();
    return rows.map((r) => ({ fnId: r.fn_id, data: r.data }));
  }

  async saveHistograms(rows: readonly HistogramRow[]): Promise<void> {
    if (rows.length === 0) return;
    const db = this.db();
    const now = Date.now();
    await this.disk.write(() =>
      db.transaction().execute(async (trx) => {
        const ids = rows.map((r) => r.fnId);
        const live = new Set((await trx.selectFrom('fns').select('id').where('id', 'in', ids).execute()).map((r) => r.id));
        const kept = rows.filter((r) => live.has(r.fnId));
        if (kept.length === 0) return;
        await trx
          .deleteFrom('keepalive_histograms')
          .where(
            'fn_id',
            'in',
            kept.map((r) => r.fnId),
          )
          .execute();
        await trx
          .insertInto('keepalive_histograms')
          .values(kept.map((r) => ({ fn_id: r.fnId, data: r.data, updated_at: now })))
          .execute();
      }),
    );
  }
}
