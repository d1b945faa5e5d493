/**
 * Call records arrive by the thousand per second. On SQLite (whose driver
 * is synchronous: every statement runs on the event loop) they are written,
 * and pruned, by a worker thread with its own connection to the same file,
 * so a batch costs the server's event loop only a message: WAL lets the
 * server read while the worker writes. The thread runs at a lower priority
 * than the server's own, so on a busy machine keeping records yields to
 * serving calls. Statements are prepared once; each batch is one
 * transaction. An in-memory database cannot be shared with a thread: the
 * same program runs in place on it.
 */
import { createRequire } from 'node:module';
import { Worker } from 'node:worker_threads';
import type BetterSqlite3 from 'better-sqlite3';
import type { CallLogEntry } from '../calls.js';
import type { BatchWriter } from './calls.js';

/**
 * The writer's program, as plain CommonJS source so that the worker thread
 * and the in-place writer run the very same code: given a better-sqlite3
 * database `db`, it returns `write(calls, logs)` and `prune(before, perFn)`.
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
const PROGRAM = `
const insertCall = db.prepare(
  'INSERT INTO calls (id, fn_id, app_id, status, created_at, record, log) VALUES (@id, @fn_id, @app_id, @status, @created_at, @record, @log) ' +
  'ON CONFLICT (id) DO UPDATE SET status = excluded.status, record = excluded.record, log = coalesce(excluded.log, calls.log)');
const setLog = db.prepare('UPDATE calls SET log = @log WHERE id = @callId');
const placeholder = db.prepare(
  "INSERT INTO calls (id, fn_id, app_id, status, created_at, record, log) VALUES (@id, @fn_id, @app_id, 'running', @created_at, @record, @log) " +
  'ON CONFLICT (id) DO UPDATE SET log = excluded.log');
const pruneOld = db.prepare('DELETE FROM calls WHERE created_at < ?');
const crowded = db.prepare('SELECT fn_id FROM calls GROUP BY fn_id HAVING count(*) > ?').pluck();
const edge = db.prepare('SELECT created_at, id FROM calls WHERE fn_id = ? ORDER BY created_at DESC, id DESC LIMIT 1 OFFSET ?');
const pruneFn = db.prepare('DELETE FROM calls WHERE fn_id = @fn_id AND (created_at < @created_at OR (created_at = @created_at AND id < @id))');
return {
  write: db.transaction((records, logs) => {
    // A log whose record is in the same batch goes into the record's row.
    const byId = new Map();
    for (const log of logs) byId.set(log.callId, log);
    for (const json of records) {
      const r = JSON.parse(json);
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
  prune: db.transaction((before, perFn) => {
    let removed = pruneOld.run(before).changes;
    for (const fn_id of crowded.all(perFn)) {
      const last = edge.get(fn_id, perFn - 1);
      if (last) removed += pruneFn.run({ fn_id, created_at: last.created_at, id: last.id }).changes;
    }
    return removed;
  }),
};
`;

interface Program {
  write(records: readonly string[], logs: readonly CallLogEntry[]): void;
  prune(before: string, perFn: number): number;
}

/** Writes batches on the calling thread (an in-memory database). */
export function inPlaceWriter(database: BetterSqlite3.Database): BatchWriter {
  // The one program both writers run (see PROGRAM).
  const program = new Function('db', PROGRAM)(database) as Program;
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

// The worker: it lowers its own priority (on Linux a thread's nice value is
// its own), opens the file, and answers each message with its id and result
// (or error).
const WORKER = `
const { parentPort, workerData } = require('node:worker_threads');
try { require('node:os').setPriority(workerData.nice); } catch {}
const Database = require(workerData.driver);
const db = new Database(workerData.path);
db.pragma('journal_mode = WAL');
db.pragma('synchronous = NORMAL');
db.pragma('busy_timeout = 5000');
const program = (function (db) { ${PROGRAM} })(db);
parentPort.on('message', (m) => {
  if (m.kind === 'close') { db.close(); parentPort.postMessage({ id: m.id }); return; }
  try {
    const result = m.kind === 'write' ? program.write(m.records, m.logs) : program.prune(m.before, m.perFn);
    parentPort.postMessage({ id: m.id, result });
  } catch (err) { parentPort.postMessage({ id: m.id, error: String(err && err.message || err), code: err && err.code }); }
});
`;

/**
 * How much lower than the server the writer thread runs (a nice value):
 * under contention it gets about a tenth of a core, still several thousand
 * records a second, so it cannot fall behind for long.
 */
const WRITER_NICE = 10;

type Message = { kind: 'write'; records: readonly string[]; logs: readonly CallLogEntry[] } | { kind: 'prune'; before: string; perFn: number } | { kind: 'close' };

/** Writes batches from a worker thread with its own connection to the file at `path`. */
export function workerWriter(path: string): BatchWriter {
  const driver = createRequire(import.meta.url).resolve('better-sqlite3');
  const worker = new Worker(WORKER, { eval: true, workerData: { path, driver, nice: WRITER_NICE } });
  // The server's exit is not held up by an idle writer.
  worker.unref();
  let seq = 0;
  let failed: Error | undefined;
  const pending = new Map<number, { resolve: (result: unknown) => void; reject: (err: Error) => void }>();
  const failAll = (err: Error): void => {
    failed ??= err;
    for (const p of pending.values()) p.reject(err);
    pending.clear();
  };
  worker.on('message', (m: { id: number; result?: unknown; error?: string; code?: string }) => {
    const p = pending.get(m.id);
    pending.delete(m.id);
    if (m.error === undefined) p?.resolve(m.result);
    // The driver's code (SQLITE_FULL, ...) travels with the words: the store decides by it.
    else p?.reject(Object.assign(new Error(`call records not written: ${m.error}`), m.code === undefined ? {} : { code: m.code }));
  });
  worker.on('error', (err) => failAll(err));
  worker.on('exit', (code) => failAll(new Error(`the call record writer stopped (exit ${code})`)));
  const send = (message: Message): Promise<unknown> => {
    if (failed) return Promise.reject(failed);
    const id = seq++;
    return new Promise<unknown>((resolve, reject) => {
      pending.set(id, { resolve, reject });
      // Keeps the process alive only while a message is in flight.
      worker.ref();
      worker.postMessage({ id, ...message });
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
