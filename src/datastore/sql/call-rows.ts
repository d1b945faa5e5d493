/**
 * A batch of call records (as JSON) and logs as rows of the `calls` table,
 * the same for every database's batch writer (sqlite-writer.ts on its
 * thread, batch-writer.ts on a server): one row per id, a later record of
 * an id replacing an earlier one and keeping its log; a log goes into its
 * record's row, or, when its record is not in the batch, is written on its
 * own (onto the stored row, else into a `running` placeholder that holds it
 * until the record arrives).
 */
import type { CallLogEntry } from '../calls.js';
import type { CallsTable } from './schema.js';

/** The columns a record's row is keyed and filtered by, read from its JSON. */
interface RecordColumns {
  readonly id: string;
  readonly fn_id: string;
  readonly app_id: string;
  readonly status: string;
  readonly created_at: string;
}

/** The batch's rows, and the logs whose record is not in it. */
export function callRows(records: readonly string[], logs: readonly CallLogEntry[]): { rows: CallsTable[]; alone: CallLogEntry[] } {
  const logOf = new Map<string, CallLogEntry>();
  for (const log of logs) logOf.set(log.callId, log);
  const rows = new Map<string, CallsTable>();
  for (const json of records) {
    const r = JSON.parse(json) as RecordColumns;
    const found = logOf.get(r.id);
    const log = found !== undefined && found.fnId === r.fn_id ? found : undefined;
    if (log !== undefined) logOf.delete(r.id);
    const earlier = rows.get(r.id);
    rows.set(r.id, { id: r.id, fn_id: r.fn_id, app_id: r.app_id, status: r.status, created_at: r.created_at, record: json, log: log?.log ?? earlier?.log ?? null });
  }
  return { rows: [...rows.values()], alone: [...logOf.values()] };
}

/** The `running` row that holds a log whose record is not stored yet. */
export function placeholderRow(log: CallLogEntry): CallsTable & { log: string } {
  const created_at = new Date(log.created).toISOString();
  const record = JSON.stringify({ id: log.callId, status: 'running', app_id: log.appId, fn_id: log.fnId, created_at, stats: [] });
  return { id: log.callId, fn_id: log.fnId, app_id: log.appId, status: 'running', created_at, record, log: log.log };
}
