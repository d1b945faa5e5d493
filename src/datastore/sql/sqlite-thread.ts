/**
 * The SQLite writer thread. SQLite's driver is synchronous (every statement
 * runs on the event loop), and a file has one writer at a time: a server
 * thread that writes while another connection holds the lock sleeps in the
 * driver's busy handler, with the event loop stopped. So a database file's
 * frequent writes (call records, the embedded queue of detached calls) all
 * go to one thread with its own connection, and the server's event loop
 * only sends them messages. WAL lets the server read meanwhile.
 *
 * What the thread can do comes as programs: named ops with their
 * statements prepared once (the records' writer, sqlite-writer.ts; the
 * queue's, mq/sqlite-program.ts), loaded by the module that uses them.
 *
 * Group commit: ops that come while a batch is with the thread go together
 * as the next batch, one transaction (BEGIN IMMEDIATE: the lock is taken
 * before anything is read, so another process sharing the file never
 * changes what a batch read before it writes), each op in a savepoint of
 * its own: an op that fails fails only its caller. Each caller's promise
 * settles once the batch it joined is committed.
 *
 *   run(op) ─▶ [pending] ─postMessage(batch)─▶ [sqlite-thread-worker.ts] runBatch ─▶ results
 *
 * An in-memory database cannot be shared with a thread: the same programs
 * run in place on it, one op per transaction.
 */
import { Worker } from 'node:worker_threads';
import type BetterSqlite3 from 'better-sqlite3';

/** A program's ops on the thread's connection. Arguments and results cross threads: plain data, Buffers. */
export type SqliteProgram = Readonly<Record<string, (...args: never[]) => unknown>>;

/** Where the thread finds a program: the module and its export (a factory preparing the statements on `db`), and the same factory for in-place use. */
export interface ProgramSource {
  /** The name ops give to reach it. */
  readonly name: string;
  /** The module that exports it (import.meta.url of its file). */
  readonly module: string;
  /** The export's name. */
  readonly exported: string;
  /** The factory itself: what the thread imports, for a database run in place. */
  readonly make: (db: BetterSqlite3.Database) => SqliteProgram;
}

export interface SqliteThread {
  /** Makes a program's ops available (once per name; again is a no-op). */
  load(source: ProgramSource): Promise<void>;
  /**
   * Runs `op` of `program` with `args`, joining the next batch. `transfer`
   * lists ArrayBuffers of the arguments handed to the thread instead of
   * copied (the caller must not use them after). Rejects with the error's
   * words and the driver's code (`code`: SQLITE_FULL, ...).
   */
  run<T>(program: string, op: string, args: readonly unknown[], transfer?: readonly ArrayBuffer[]): Promise<T>;
  /** Finishes the batches in flight and stops the thread. Idempotent. */
  close(): Promise<void>;
}

/** One op of a batch. */
export interface OpCall {
  readonly program: string;
  readonly op: string;
  readonly args: readonly unknown[];
}

/** An op's outcome: its value, or its error's words and the driver's code. */
export type OpResult = { readonly value: unknown } | { readonly error: string; readonly code?: string };

/** What the thread is started with. */
export interface ThreadData {
  /** The database file. */
  readonly path: string;
  /** The thread's nice value. */
  readonly nice: number;
}

export type ThreadRequest =
  | { readonly id: number; readonly kind: 'load'; readonly name: string; readonly module: string; readonly exported: string }
  | { readonly id: number; readonly kind: 'batch'; readonly ops: readonly OpCall[] }
  | { readonly id: number; readonly kind: 'close' };

/** The thread's answer to a request of the same id: a batch's results in its order, or the error of a load or of the whole batch. */
export interface ThreadReply {
  readonly id: number;
  readonly results?: readonly OpResult[];
  readonly error?: string;
  readonly code?: string;
}

/** Ops per batch, and argument bytes (roughly: bodies) per batch: the rest wait for the next. */
const MAX_BATCH_OPS = 1000;
const MAX_BATCH_BYTES = 16 * 1024 * 1024;

/**
 * How much lower than the server the thread runs (a nice value): under
 * contention keeping records and queueing yields to serving calls, yet
 * gets about a tenth of a core, thousands of writes a second.
 */
const THREAD_NICE = 10;

export function errorResult(err: unknown): { error: string; code?: string } {
  const e = err as { message?: unknown; code?: unknown } | null;
  return { error: String((e && e.message) || err), ...(typeof e?.code === 'string' ? { code: e.code } : {}) };
}

/**
 * Runs a batch on `db` (whichever thread holds it): one immediate
 * transaction, each op in a nested one (a savepoint), so an op that throws
 * rolls back only itself. A batch whose commit fails fails every op.
 * `transfer` gets the ArrayBuffers of result Buffers that own theirs whole
 * (bodies read from the file), handed over rather than copied.
 */
export function runBatch(db: BetterSqlite3.Database, programs: ReadonlyMap<string, SqliteProgram>, ops: readonly OpCall[], transfer?: ArrayBuffer[]): OpResult[] {
  const one = db.transaction((call: OpCall): unknown => {
    const fn = programs.get(call.program)?.[call.op] as ((...args: readonly unknown[]) => unknown) | undefined;
    if (!fn) throw new Error(`the SQLite thread has no op ${call.program}.${call.op} (was its program loaded?)`);
    return fn(...call.args);
  });
  const results: OpResult[] = [];
  const all = db.transaction(() => {
    for (const call of ops) {
      try {
        results.push({ value: one(call) });
      } catch (err) {
        results.push(errorResult(err));
      }
    }
  });
  try {
    all.immediate();
  } catch (err) {
    const failed = errorResult(err);
    return ops.map(() => failed);
  }
  if (transfer) for (const r of results) if ('value' in r) collectOwned(r.value, transfer, 3);
  return results;
}

/** The memory of `bytes` when it is all of an ArrayBuffer (then it can be handed to the thread rather than copied); else undefined. */
export function ownedArrayBuffer(bytes: Uint8Array): ArrayBuffer | undefined {
  const b = bytes.buffer;
  return b instanceof ArrayBuffer && bytes.byteOffset === 0 && bytes.byteLength === b.byteLength && b.byteLength > 0 ? b : undefined;
}

/** ArrayBuffers that `value`'s Buffers (to `depth` levels of arrays and objects) own whole. */
function collectOwned(value: unknown, into: ArrayBuffer[], depth: number): void {
  if (value instanceof Uint8Array) {
    const b = ownedArrayBuffer(value);
    if (b && !into.includes(b)) into.push(b);
    return;
  }
  if (depth === 0 || value === null || typeof value !== 'object') return;
  for (const v of Array.isArray(value) ? value : Object.values(value)) collectOwned(v, into, depth - 1);
}

/** Bytes an op's arguments weigh, counting only binary ones (bodies): what bounds a batch. */
function weight(args: readonly unknown[]): number {
  let n = 0;
  for (const a of args) {
    if (a instanceof Uint8Array) n += a.byteLength;
    else if (a !== null && typeof a === 'object') for (const v of Object.values(a)) if (v instanceof Uint8Array) n += v.byteLength;
  }
  return n;
}

function opError(r: { error: string; code?: string }): Error {
  return Object.assign(new Error(r.error), r.code === undefined ? {} : { code: r.code });
}

/** Runs programs on the calling thread, on `database` (an in-memory one). */
export function inPlaceThread(database: BetterSqlite3.Database): SqliteThread {
  const programs = new Map<string, SqliteProgram>();
  let closed = false;
  return {
    async load(source) {
      if (!programs.has(source.name)) programs.set(source.name, source.make(database));
    },
    async run<T>(program: string, op: string, args: readonly unknown[]): Promise<T> {
      if (closed) throw new Error('the database is closed');
      const [r] = runBatch(database, programs, [{ program, op, args }]);
      if (!r || !('value' in r)) throw opError(r ?? { error: 'no result' });
      return r.value as T;
    },
    async close() {
      closed = true;
    },
  };
}

interface Pending {
  readonly call: OpCall;
  readonly transfer: readonly ArrayBuffer[];
  readonly bytes: number;
  resolve(value: unknown): void;
  reject(err: Error): void;
}

/** Runs programs on a thread of their own, with its own connection to the file at `path`. */
export function workerThread(path: string): SqliteThread {
  const workerData: ThreadData = { path, nice: THREAD_NICE };
  // The thread is a module of its own, compiled beside this one.
  const worker = new Worker(new URL('./sqlite-thread-worker.js', import.meta.url), { workerData });
  // The server's exit is not held up by an idle thread.
  worker.unref();
  let seq = 0;
  let failed: Error | undefined;
  const answers = new Map<number, (reply: ThreadReply) => void>();
  const loaded = new Map<string, Promise<void>>();
  /** Ops waiting for the batch in flight to finish. */
  let waiting: Pending[] = [];
  let inFlight = false;
  /** Told when no batch is in flight any more. */
  let idle: (() => void)[] = [];
  let closing: Promise<void> | undefined;

  const failAll = (err: Error): void => {
    failed ??= err;
    for (const answer of answers.values()) answer({ id: -1, error: failed.message });
    answers.clear();
    for (const p of waiting) p.reject(failed);
    waiting = [];
  };
  worker.on('message', (m: ThreadReply) => {
    const answer = answers.get(m.id);
    answers.delete(m.id);
    if (answers.size === 0) worker.unref();
    answer?.(m);
  });
  worker.on('error', (err) => failAll(err));
  worker.on('exit', (code) => failAll(new Error(`the SQLite writer thread stopped (exit ${code})`)));

  const request = (req: ThreadRequest, transfer: readonly ArrayBuffer[] = []): Promise<ThreadReply> => {
    if (failed) return Promise.reject(failed);
    return new Promise<ThreadReply>((resolve) => {
      answers.set(req.id, resolve);
      // Keeps the process alive only while a message is in flight.
      worker.ref();
      worker.postMessage(req, transfer as ArrayBuffer[]);
    });
  };

  /** Sends the ops waiting as one batch; once it is answered, the next. */
  const flush = (): void => {
    if (waiting.length === 0 || failed) {
      inFlight = false;
      for (const tell of idle) tell();
      idle = [];
      return;
    }
    inFlight = true;
    let bytes = 0;
    let n = 0;
    while (n < waiting.length && n < MAX_BATCH_OPS && (n === 0 || bytes + waiting[n]!.bytes <= MAX_BATCH_BYTES)) bytes += waiting[n++]!.bytes;
    const batch = waiting.slice(0, n);
    waiting = waiting.slice(n);
    void request(
      { id: seq++, kind: 'batch', ops: batch.map((p) => p.call) },
      batch.flatMap((p) => p.transfer),
    ).then(
      (reply) => {
        batch.forEach((p, i) => {
          const r = reply.results?.[i] ?? { error: reply.error ?? 'no answer from the SQLite writer thread', ...(reply.code === undefined ? {} : { code: reply.code }) };
          if ('value' in r) p.resolve(r.value);
          else p.reject(opError(r));
        });
        flush();
      },
      (err: Error) => {
        for (const p of batch) p.reject(err);
        flush();
      },
    );
  };

  return {
    load(source) {
      let done = loaded.get(source.name);
      if (!done) {
        done = request({ id: seq++, kind: 'load', name: source.name, module: source.module, exported: source.exported }).then((reply) => {
          if (reply.error !== undefined) throw opError({ error: reply.error, ...(reply.code === undefined ? {} : { code: reply.code }) });
        });
        loaded.set(source.name, done);
      }
      return done;
    },
    run<T>(program: string, op: string, args: readonly unknown[], transfer: readonly ArrayBuffer[] = []): Promise<T> {
      if (failed) return Promise.reject(failed);
      if (closing) return Promise.reject(new Error('the database is closed'));
      return new Promise<T>((resolve, reject) => {
        waiting.push({ call: { program, op, args }, transfer, bytes: weight(args), resolve: resolve as (v: unknown) => void, reject });
        if (!inFlight) flush();
      });
    },
    close() {
      closing ??= (async () => {
        if (inFlight) await new Promise<void>((resolve) => idle.push(resolve));
        await request({ id: seq++, kind: 'close' }).catch(() => undefined);
        await worker.terminate();
      })();
      return closing;
    },
  };
}
