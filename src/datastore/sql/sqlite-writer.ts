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
import type { BatchWriter, RecordColumns } from './calls.js';

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
  const insertCall = db.prepare<{ id: string; fn_id: string; app_id: string; status: string; created_at: string; record: string; log: string | null }>(
    'INSERT INTO calls (id, fn_id, app_id, status, created_at, record, log) VALUES (@id, @fn_id, @app_id, @status, @created_at, @record, @log) ' +
      'ON CONFLICT (id) DO UPDATE SET status = excluded.status, record = excluded.record, log = coalesce(excluded.log, calls.log)',
  );
  const setLog = db.prepare<CallLogEntry>('UPDATE calls SET log = @log WHERE id = @callId');
  const placeholder = db.prepare<{ id: string; fn_id: string; app_id: string; created_at: string; record: string; log: string }>(
    "INSERT INTO calls (id, fn_id, app_id, status, created_at, record, log) VALUES (@id, @fn_id, @app_id, 'running', @created_at, @record, @log) " +
      'ON CONFLICT (id) DO UPDATE SET log = excluded.log',
  );
  const pruneOld = db.prepare<[string]>('DELETE FROM calls WHERE created_at < ?');
  const crowded = db.prepare<[number], string>('SELECT fn_id FROM calls GROUP BY fn_id HAVING count(*) > ?').pluck();
  const edge = db.prepare<[string, number], { created_at: string; id: string }>('SELECT created_at, id FROM calls WHERE fn_id = ? ORDER BY created_at DESC, id DESC LIMIT 1 OFFSET ?');
  const pruneFn = db.prepare<{ fn_id: string; created_at: string; id: string }>('DELETE FROM calls WHERE fn_id = @fn_id AND (created_at < @created_at OR (created_at = @created_at AND id < @id))');
  return {
    write: db.transaction((records: readonly string[], logs: readonly CallLogEntry[]): void => {
      // A log whose record is in the same batch goes into the record's row.
      const byId = new Map<string, CallLogEntry>();
      for (const log of logs) byId.set(log.callId, log);
      for (const json of records) {
        const r = JSON.parse(json) as RecordColumns;
        const found = byId.get(r.id);
        const log = found !== undefined && found.fnId === r.fn_id ? found : undefined;
        if (log !== undefined) byId.delete(r.id);
        insertCall.run({ id: r.id, fn_id: r.fn_id, app_id: r.app_id, status: r.status, created_at: r.created_at, record: json, log: log === undefined ? null : log.log });
      }
      for (const log of byId.values()) {
        if (setLog.run(log).changes === 0) {
          const created_at = new Date(log.created).toISOString();
          const record = JSON.stringify({ id: log.callId, status: 'running', app_id: log.appId, fn_id: log.fnId, created_at, stats: [] });
          placeholder.run({ id: log.callId, fn_id: log.fnId, app_id: log.appId, created_at, record, log: log.log });
        }
      }
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
  // Group commit: writes that come while one is with the thread wait for it, then go as one batch (one transaction);
  // each caller's promise settles once the batch it joined is stored. A detached call's record (its caller waits for
  // it before the 202) no longer costs a transaction and a round trip of its own when many come at once. A batch the
  // database refuses is tried again part by part, so that one caller's bad record fails no other's.
  interface Part {
    readonly records: readonly string[];
    readonly logs: readonly CallLogEntry[];
    readonly resolve: () => void;
    readonly reject: (err: Error) => void;
  }
  let group: Part[] | undefined;
  let writing: Promise<void> = Promise.resolve();
  const flush = async (parts: Part[]): Promise<void> => {
    try {
      await send({ kind: 'write', records: parts.flatMap((p) => p.records), logs: parts.flatMap((p) => p.logs) });
      for (const p of parts) p.resolve();
    } catch (err) {
      if (parts.length === 1) return parts[0]!.reject(err as Error);
      for (const p of parts) {
        await send({ kind: 'write', records: p.records, logs: p.logs }).then(
          () => p.resolve(),
          (e: unknown) => p.reject(e as Error),
        );
      }
    }
  };
  const write = (records: readonly string[], logs: readonly CallLogEntry[]): Promise<void> =>
    new Promise<void>((resolve, reject) => {
      const part: Part = { records, logs, resolve, reject };
      if (group) {
        group.push(part);
        return;
      }
      const parts = [part];
      group = parts;
      writing = writing.then(() => {
        // From now on, writes form the next group.
        if (group === parts) group = undefined;
        return flush(parts);
      });
    });
  let closing: Promise<void> | undefined;
  return {
    write,
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
