/**
 * Call records arrive by the thousand per second. On SQLite (whose driver
 * is synchronous: every statement runs on the event loop) they are written
 * by a worker thread with its own connection to the same file, so a batch
 * costs the server's event loop only a message: WAL lets the server read
 * while the worker writes. Statements are prepared once; each batch is one
 * transaction. An in-memory database cannot be shared with a thread: it is
 * written in place, with the same prepared statements.
 */
import { createRequire } from 'node:module';
import { Worker } from 'node:worker_threads';
import type BetterSqlite3 from 'better-sqlite3';
import type { BatchWriter } from './calls.js';
import type { CallLogsTable, CallsTable } from './schema.js';

const INSERT_CALL =
  'INSERT INTO calls (id, fn_id, app_id, status, created_at, record) VALUES (@id, @fn_id, @app_id, @status, @created_at, @record) ' +
  'ON CONFLICT (id) DO UPDATE SET status = excluded.status, record = excluded.record';
const INSERT_LOG = 'INSERT INTO call_logs (call_id, fn_id, log) VALUES (@call_id, @fn_id, @log) ON CONFLICT (call_id) DO UPDATE SET log = excluded.log';

/** The batch inserts on `database`, prepared once. */
function batchInserts(database: BetterSqlite3.Database): { calls(rows: readonly CallsTable[]): void; logs(rows: readonly CallLogsTable[]): void } {
  const call = database.prepare(INSERT_CALL);
  const log = database.prepare(INSERT_LOG);
  return {
    calls: database.transaction((rows: readonly CallsTable[]) => {
      for (const row of rows) call.run(row);
    }),
    logs: database.transaction((rows: readonly CallLogsTable[]) => {
      for (const row of rows) log.run(row);
    }),
  };
}

/** Writes batches on the calling thread (an in-memory database). */
export function inPlaceWriter(database: BetterSqlite3.Database): BatchWriter {
  const inserts = batchInserts(database);
  return {
    async calls(rows) {
      inserts.calls(rows);
    },
    async logs(rows) {
      inserts.logs(rows);
    },
    async close() {},
  };
}

// The worker's program, CommonJS as `eval` workers run it: it opens the file,
// prepares the statements, and answers each batch with its id (and error).
const WORKER = `
const { parentPort, workerData } = require('node:worker_threads');
const Database = require(workerData.driver);
const db = new Database(workerData.path);
db.pragma('journal_mode = WAL');
db.pragma('synchronous = NORMAL');
db.pragma('busy_timeout = 5000');
const call = db.prepare(${JSON.stringify(INSERT_CALL)});
const log = db.prepare(${JSON.stringify(INSERT_LOG)});
const write = {
  calls: db.transaction((rows) => { for (const r of rows) call.run(r); }),
  logs: db.transaction((rows) => { for (const r of rows) log.run(r); }),
};
parentPort.on('message', (m) => {
  if (m.kind === 'close') { db.close(); parentPort.postMessage({ id: m.id }); return; }
  try { write[m.kind](m.rows); parentPort.postMessage({ id: m.id }); }
  catch (err) { parentPort.postMessage({ id: m.id, error: String(err && err.message || err) }); }
});
`;

/** Writes batches from a worker thread with its own connection to the file at `path`. */
export function workerWriter(path: string): BatchWriter {
  const driver = createRequire(import.meta.url).resolve('better-sqlite3');
  const worker = new Worker(WORKER, { eval: true, workerData: { path, driver } });
  // The server's exit is not held up by an idle writer.
  worker.unref();
  let seq = 0;
  let failed: Error | undefined;
  const pending = new Map<number, { resolve: () => void; reject: (err: Error) => void }>();
  const failAll = (err: Error): void => {
    failed ??= err;
    for (const p of pending.values()) p.reject(err);
    pending.clear();
  };
  worker.on('message', (m: { id: number; error?: string }) => {
    const p = pending.get(m.id);
    pending.delete(m.id);
    if (m.error === undefined) p?.resolve();
    else p?.reject(new Error(`call records not written: ${m.error}`));
  });
  worker.on('error', (err) => failAll(err));
  worker.on('exit', (code) => failAll(new Error(`the call record writer stopped (exit ${code})`)));
  const send = (kind: 'calls' | 'logs' | 'close', rows?: readonly unknown[]): Promise<void> => {
    if (failed) return Promise.reject(failed);
    const id = seq++;
    return new Promise<void>((resolve, reject) => {
      pending.set(id, { resolve, reject });
      // Keeps the process alive only while a batch is in flight.
      worker.ref();
      worker.postMessage({ id, kind, rows });
    }).finally(() => {
      if (pending.size === 0) worker.unref();
    });
  };
  let closing: Promise<void> | undefined;
  return {
    calls: (rows) => send('calls', rows),
    logs: (rows) => send('logs', rows),
    close() {
      closing ??= send('close')
        .catch(() => undefined)
        .then(() => worker.terminate())
        .then(() => undefined);
      return closing;
    },
  };
}
