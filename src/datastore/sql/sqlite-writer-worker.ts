/**
 * The call record writer's thread (started by sqlite-writer.ts's
 * workerWriter): it lowers its own priority, opens its own connection to
 * the database file, and answers each WriterRequest with its id and result,
 * or the error's words and the driver's code, in the order they came.
 */
import { setPriority } from 'node:os';
import { parentPort, workerData } from 'node:worker_threads';
import BetterSqlite3 from 'better-sqlite3';
import { writerProgram, type WriterData, type WriterReply, type WriterRequest } from './sqlite-writer.js';

const data = workerData as WriterData;
const port = parentPort!;

try {
  // On Linux a thread's nice value is its own: this lowers the writer only, not the server.
  setPriority(data.nice);
} catch {
  // Not allowed here (some containers): the writer runs at the server's priority.
}

const db = new BetterSqlite3(data.path);
db.pragma('journal_mode = WAL');
db.pragma('synchronous = NORMAL');
db.pragma('busy_timeout = 5000');
const program = writerProgram(db);

port.on('message', (m: WriterRequest) => {
  if (m.kind === 'close') {
    db.close();
    port.postMessage({ id: m.id } satisfies WriterReply);
    return;
  }
  let reply: WriterReply;
  try {
    if (m.kind === 'write') {
      program.write(m.records, m.logs);
      reply = { id: m.id };
    } else reply = { id: m.id, result: program.prune(m.before, m.perFn) };
  } catch (err) {
    const e = err as { message?: unknown; code?: unknown } | null;
    reply = { id: m.id, error: String((e && e.message) || err), ...(typeof e?.code === 'string' ? { code: e.code } : {}) };
  }
  port.postMessage(reply);
});
