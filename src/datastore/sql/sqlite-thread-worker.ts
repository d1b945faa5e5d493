/**
 * The SQLite writer thread (started by sqlite-thread.ts's workerThread): it
 * lowers its own priority, opens its own connection to the database file,
 * loads the programs it is asked to, and answers each request with its id:
 * a batch with its ops' results, in the order they came.
 */
import { setPriority } from 'node:os';
import { parentPort, workerData } from 'node:worker_threads';
import BetterSqlite3 from 'better-sqlite3';
import { errorResult, runBatch, type ProgramSource, type SqliteProgram, type ThreadData, type ThreadReply, type ThreadRequest } from './sqlite-thread.js';

const data = workerData as ThreadData;
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
const programs = new Map<string, SqliteProgram>();

async function answer(m: ThreadRequest): Promise<void> {
  switch (m.kind) {
    case 'close':
      db.close();
      port.postMessage({ id: m.id } satisfies ThreadReply);
      return;
    case 'load':
      try {
        if (!programs.has(m.name)) {
          const mod = (await import(m.module)) as Record<string, ProgramSource['make'] | undefined>;
          const make = mod[m.exported];
          if (typeof make !== 'function') throw new Error(`${m.module} exports no program ${m.exported}`);
          programs.set(m.name, make(db));
        }
        port.postMessage({ id: m.id } satisfies ThreadReply);
      } catch (err) {
        port.postMessage({ id: m.id, ...errorResult(err) } satisfies ThreadReply);
      }
      return;
    case 'batch': {
      const transfer: ArrayBuffer[] = [];
      const results = runBatch(db, programs, m.ops, transfer);
      port.postMessage({ id: m.id, results } satisfies ThreadReply, transfer);
    }
  }
}

// In the order they came: a load finishes before the batches that use it.
let chain = Promise.resolve();
port.on('message', (m: ThreadRequest) => {
  chain = chain.then(() => answer(m));
});
