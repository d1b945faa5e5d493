/**
 * Call records arrive by the thousand per second. On SQLite they are
 * written, and pruned, by the database's writer thread (sqlite-thread.ts),
 * so a batch costs the server's event loop only a message. Statements are
 * prepared once; each batch is one transaction.
 *
 *   SqlCallStore ─▶ threadWriter ─▶ thread.run('calls', 'write') ─▶ writerProgram(db).write
 */
import type BetterSqlite3 from 'better-sqlite3';
import type { CallLogEntry } from '../calls.js';
import type { BatchWriter } from './calls.js';
import { callRows, placeholderRow } from './call-rows.js';
import type { CallsTable } from './schema.js';
import type { ProgramSource, SqliteThread } from './sqlite-thread.js';

/** What the writer does with a batch, on whichever thread holds its connection. */
export type WriterProgram = {
  write(records: readonly string[], logs: readonly CallLogEntry[]): void;
  prune(before: string, perFn: number): number;
};

/**
 * The writer's statements on `db`, prepared once: the writer thread runs
 * this code (or the server itself, on an in-memory database).
 *
 * Records come as their JSON (serialized when the call ended, so nothing of
 * a call lives on in the server until its batch is written); the row's
 * columns are read from it here, off the event loop.
 *
 * A record replaces an earlier one with its id (a detached call moves from
 * queued to its outcome) and keeps the log already stored. A log lands on
 * its call's row; when the record is not there yet (the log of a call cut
 * short can come first), a `running` placeholder holds it until the record
 * arrives.
 */
export function writerProgram(db: BetterSqlite3.Database): WriterProgram {
  const insertCall = db.prepare<CallsTable>(
    'INSERT INTO calls (id, fn_id, app_id, status, created_at, record, log) VALUES (@id, @fn_id, @app_id, @status, @created_at, @record, @log) ' +
      'ON CONFLICT (id) DO UPDATE SET status = excluded.status, record = excluded.record, log = coalesce(excluded.log, calls.log)',
  );
  const setLog = db.prepare<CallLogEntry>('UPDATE calls SET log = @log WHERE id = @callId');
  const placeholder = db.prepare<CallsTable>(
    'INSERT INTO calls (id, fn_id, app_id, status, created_at, record, log) VALUES (@id, @fn_id, @app_id, @status, @created_at, @record, @log) ' + 'ON CONFLICT (id) DO UPDATE SET log = excluded.log',
  );
  const pruneOld = db.prepare<[string]>('DELETE FROM calls WHERE created_at < ?');
  const crowded = db.prepare<[number], string>('SELECT fn_id FROM calls GROUP BY fn_id HAVING count(*) > ?').pluck();
  const edge = db.prepare<[string, number], { created_at: string; id: string }>('SELECT created_at, id FROM calls WHERE fn_id = ? ORDER BY created_at DESC, id DESC LIMIT 1 OFFSET ?');
  const pruneFn = db.prepare<{ fn_id: string; created_at: string; id: string }>('DELETE FROM calls WHERE fn_id = @fn_id AND (created_at < @created_at OR (created_at = @created_at AND id < @id))');
  return {
    write: db.transaction((records: readonly string[], logs: readonly CallLogEntry[]): void => {
      const { rows, alone } = callRows(records, logs);
      for (const row of rows) insertCall.run(row);
      for (const log of alone) if (setLog.run(log).changes === 0) placeholder.run(placeholderRow(log));
    }),
    prune: db.transaction((before: string, perFn: number): number => {
      let removed = pruneOld.run(before).changes;
      for (const fn_id of crowded.all(perFn)) {
        const last = edge.get(fn_id, perFn - 1);
        if (last) removed += pruneFn.run({ fn_id, created_at: last.created_at, id: last.id }).changes;
      }
      return removed;
    }),
  };
}

/** The records' program, for the SQLite writer thread (sqlite-thread.ts). */
export const recordsProgram: ProgramSource = { name: 'calls', module: import.meta.url, exported: 'writerProgram', make: writerProgram };

/** Writes batches of call records through the database's SQLite thread (which the datastore closes). */
export function threadWriter(thread: SqliteThread): BatchWriter {
  const loaded = thread.load(recordsProgram);
  // A thread that could not load it fails each write with why; not here.
  loaded.catch(() => undefined);
  const run = async <T>(op: keyof WriterProgram, args: readonly unknown[]): Promise<T> => {
    await loaded;
    try {
      return await thread.run<T>(recordsProgram.name, op, args);
    } catch (err) {
      // The driver's code (SQLITE_FULL, ...) travels with the words: the store decides by it.
      throw Object.assign(new Error(`call records not written: ${(err as Error).message}`), { code: (err as { code?: unknown }).code }, { cause: err });
    }
  };
  return {
    write: async (records, logs) => {
      await run<undefined>('write', [records, logs]);
    },
    prune: async (before, perFn) => Number(await run<number>('prune', [before, perFn])),
    async close() {},
  };
}
