/**
 * Call records arrive by the thousand per second. On SQLite (whose driver
 * is synchronous: every statement runs on the event loop) they are written,
 * and pruned, by a worker thread with its own connection to the same file,
 * so a batch costs the server's event loop only a message: WAL lets the
 * server read while the worker writes. The thread runs at a lower priority
 * than the server's own, so on a busy machine keeping records yields to
 * serving calls. Statements are prepared once; each batch is one
 * transaction. An in-memory database cannot be shared with a thread: the
 * same statements run in place on it.
 *
 *   store -> postMessage(WriterRequest) -> [sqlite-writer-worker.ts] writerProgram(db) -> WriterReply
 */
import { Worker } from 'node:worker_threads';
import type BetterSqlite3 from 'better-sqlite3';
import type { CallLogEntry } from '../calls.js';
import type { BatchWriter } from './calls.js';
import { callRows, placeholderRow } from './call-rows.js';
import type { CallsTable } from './schema.js';

/** What the writer does with a batch, on whichever thread holds its connection. */
export interface WriterProgram {
  write(records: readonly string[], logs: readonly CallLogEntry[]): void;
  prune(before: string, perFn: number): number;
}

/**
 * The writer's statements on `db`, prepared once: the worker thread
 * (sqlite-writer-worker.ts) and the in-place writer run this very code.
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

/** Writes batches on the calling thread (an in-memory database). */
export function inPlaceWriter(database: BetterSqlite3.Database): BatchWriter {
  const program = writerProgram(database);
  return {
    async write(records, logs) {
      program.write(records, logs);
    },
    async prune(before, perFn) {
      return program.prune(before, perFn);
    },
    async close() {},
  };
}

/** What the writer thread is started with. */
export interface WriterData {
  /** The database file. */
  readonly path: string;
  /** The thread's nice value (WRITER_NICE). */
  readonly nice: number;
}

/** What the store asks of the writer thread. */
export type WriterOp =
  | { readonly kind: 'write'; readonly records: readonly string[]; readonly logs: readonly CallLogEntry[] }
  | { readonly kind: 'prune'; readonly before: string; readonly perFn: number }
  | { readonly kind: 'close' };

/** An op as sent to the thread; it answers each with the WriterReply of the same id. */
export type WriterRequest = WriterOp & { readonly id: number };

/** The thread's answer: prune's count, or the error's words and the driver's code (SQLITE_FULL, ...). */
export interface WriterReply {
  readonly id: number;
  readonly result?: number;
  readonly error?: string;
  readonly code?: string;
}

/**
 * How much lower than the server the writer thread runs (a nice value):
 * under contention it gets about a tenth of a core, still several thousand
 * records a second, so it cannot fall behind for long.
 */
const WRITER_NICE = 10;

/** Writes batches from a worker thread with its own connection to the file at `path`. */
export function workerWriter(path: string): BatchWriter {
  const workerData: WriterData = { path, nice: WRITER_NICE };
  // The thread is a module of its own, sqlite-writer-worker.ts, compiled beside this one.
  const worker = new Worker(new URL('./sqlite-writer-worker.js', import.meta.url), { workerData });
  // The server's exit is not held up by an idle writer.
  worker.unref();
  let seq = 0;
  let failed: Error | undefined;
  const pending = new Map<number, { resolve: (result: number | undefined) => void; reject: (err: Error) => void }>();
  const failAll = (err: Error): void => {
    failed ??= err;
    for (const p of pending.values()) p.reject(err);
    pending.clear();
  };
  worker.on('message', (m: WriterReply) => {
    const p = pending.get(m.id);
    pending.delete(m.id);
    if (m.error === undefined) p?.resolve(m.result);
    // The driver's code (SQLITE_FULL, ...) travels with the words: the store decides by it.
    else p?.reject(Object.assign(new Error(`call records not written: ${m.error}`), m.code === undefined ? {} : { code: m.code }));
  });
  worker.on('error', (err) => failAll(err));
  worker.on('exit', (code) => failAll(new Error(`the call record writer stopped (exit ${code})`)));
  const send = (op: WriterOp): Promise<number | undefined> => {
    if (failed) return Promise.reject(failed);
    const id = seq++;
    return new Promise<number | undefined>((resolve, reject) => {
      pending.set(id, { resolve, reject });
      // Keeps the process alive only while a message is in flight.
      worker.ref();
      worker.postMessage({ id, ...op } satisfies WriterRequest);
    }).finally(() => {
      if (pending.size === 0) worker.unref();
    });
  };
  let closing: Promise<void> | undefined;
  return {
    write: async (records, logs) => {
      await send({ kind: 'write', records, logs });
    },
    prune: async (before, perFn) => Number(await send({ kind: 'prune', before, perFn })),
    close() {
      closing ??= send({ kind: 'close' })
        .catch(() => undefined)
        .then(() => worker.terminate())
        .then(() => undefined);
      return closing;
    },
  };
}
