/**
 * The embedded queue on a SQLite file (the default: nothing to set up),
 * written by the database's writer thread (datastore/sql/sqlite-thread.ts,
 * the statements in sqlite-program.ts). The server's event loop only sends
 * messages: it never runs a queue statement, never waits on the file's
 * lock, and a large body is stored and read by the thread.
 *
 * Group commit comes with the thread: detached calls accepted while a batch
 * is being written go together in the next one (one transaction), each
 * caller answered once its own batch is committed; an idempotency key is
 * checked in the batch's transaction, so two submissions with one key in
 * the same batch still make one call. Leases come many at a time
 * (reserveBatch), and acknowledgements of calls that ended together share a
 * transaction the same way.
 *
 * Same tables and semantics as the queue on every SQL database (sql.ts):
 * servers sharing the file never lease one item twice (a batch holds the
 * write lock from its start).
 */
import { ownedArrayBuffer, type SqliteThread } from '../datastore/index.js';
import type { Queue, QueuedCall } from './queue.js';
import { asBuffer, queueProgram, type LeasedRow } from './sqlite-program.js';

/** How the thread finds the queue's statements. */
const PROGRAM = { name: 'mq', module: new URL('./sqlite-program.js', import.meta.url).href, exported: 'queueProgram' } as const;

export class SqliteQueue implements Queue {
  private readonly loaded: Promise<void>;

  constructor(
    private readonly thread: SqliteThread,
    private readonly now: () => number = Date.now,
  ) {
    // The program's module is imported by the thread itself; the same factory serves an in-memory database.
    this.loaded = thread.load({ ...PROGRAM, make: queueProgram });
    // Failing to load shows in every op's answer; not here.
    this.loaded.catch(() => undefined);
  }

  private async op<T>(op: string, args: readonly unknown[], transfer?: readonly ArrayBuffer[]): Promise<T> {
    await this.loaded;
    return this.thread.run<T>(PROGRAM.name, op, args, transfer);
  }

  /**
   * The body's memory goes to the thread when the body owns it whole (a
   * request body read into one buffer): the caller must not read it after.
   */
  async enqueue(item: Omit<QueuedCall, 'attempts' | 'redeliveries'>, key?: string): Promise<string> {
    const { id, fnId, callJson, body, maxAttempts } = item;
    return this.op<string>(
      'enqueue',
      [{ id, fnId, callJson, body, maxAttempts }, key ?? null, this.now()],
      [ownedArrayBuffer(body)].filter((b) => b !== undefined),
    );
  }

  async redrive(fnId: string, id: string): Promise<boolean> {
    return this.op<boolean>('redrive', [fnId, id, this.now()]);
  }

  async reserve(leaseMs: number, holder: string): Promise<QueuedCall | undefined> {
    return (await this.reserveBatch(1, leaseMs, holder))[0];
  }

  async reserveBatch(max: number, leaseMs: number, holder: string, leaseByFn?: ReadonlyMap<string, number>): Promise<QueuedCall[]> {
    const rows = await this.op<LeasedRow[]>('lease', [max, leaseMs, holder, this.now(), leaseByFn]);
    return rows.map((r) => ({ id: r.id, fnId: r.fn_id, callJson: r.call_json, body: asBuffer(r.body), attempts: r.attempts, maxAttempts: r.max_attempts, redeliveries: r.redeliveries }));
  }

  async releaseDead(isDead: (holder: string) => boolean): Promise<number> {
    const gone = (await this.op<string[]>('holders', [])).filter(isDead);
    return gone.length === 0 ? 0 : this.op<number>('release', [gone]);
  }

  async extend(id: string, leaseMs: number): Promise<void> {
    await this.op('extend', [id, this.now() + leaseMs]);
  }

  async ack(id: string): Promise<void> {
    await this.op('ack', [id]);
  }

  async retry(id: string, delayMs: number, counted: boolean): Promise<void> {
    await this.op('retry', [id, this.now() + delayMs, counted]);
  }

  async dead(id: string, reason: string): Promise<void> {
    await this.op('dead', [id, reason, this.now()]);
  }

  async pruneDead(before: number): Promise<number> {
    return this.op<number>('pruneDead', [before, this.now()]);
  }

  async has(ids: readonly string[]): Promise<Set<string>> {
    return new Set(ids.length === 0 ? [] : await this.op<string[]>('has', [ids]));
  }

  async size(): Promise<number> {
    return this.op<number>('size', []);
  }

  async oldestReadyAt(): Promise<number | undefined> {
    return (await this.op<number | null>('oldestReadyAt', [this.now()])) ?? undefined;
  }

  /** The thread is the datastore's: it stops it. */
  async close(): Promise<void> {}
}
