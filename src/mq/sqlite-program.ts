/**
 * The embedded queue's statements on a SQLite file, run by the database's
 * writer thread (datastore/sql/sqlite-thread.ts), prepared once. The
 * thread runs each op in a savepoint of a batch's transaction; times come
 * from the caller (the server's clock), never from here.
 *
 * Tables and their meaning are those of the queue on every SQL database
 * (mq/sql.ts): an item's row in `mq`, its body apart in `mq_bodies` in
 * chunks, idempotency keys in `mq_keys`.
 */
import type BetterSqlite3 from 'better-sqlite3';
import type { SqliteProgram } from '../datastore/index.js';
import { IDEMPOTENCY_WINDOW_MS } from './queue.js';

/** A body is stored in chunks of this size (the layout every SQL queue shares). */
export const BODY_CHUNK_BYTES = 256 * 1024;
/** A body with no item this long after it was written is a leftover: its enqueue never finished. */
export const ORPHAN_BODY_MS = 10 * 60_000;

/** An item as enqueue takes it across threads (its body a Uint8Array once cloned). */
export interface EnqueueArgs {
  readonly id: string;
  readonly fnId: string;
  readonly callJson: string;
  readonly body: Uint8Array;
  readonly maxAttempts: number;
}

/** A leased item with its body, as the thread hands it back. */
export interface LeasedRow {
  readonly id: string;
  readonly fn_id: string;
  readonly call_json: string;
  readonly attempts: number;
  readonly max_attempts: number;
  readonly redeliveries: number;
  readonly body: Uint8Array;
}

/** A Buffer over a Uint8Array's bytes (what a Buffer becomes when it crosses threads), not a copy. */
export const asBuffer = (b: Uint8Array): Buffer => (Buffer.isBuffer(b) ? b : Buffer.from(b.buffer, b.byteOffset, b.byteLength));

/** A body as the rows it is stored in (every SQL queue): its BODY_CHUNK_BYTES pieces, views of it, with their numbers. */
export function bodyChunks(body: Buffer): Array<{ seq: number; chunk: Buffer }> {
  const chunks = [];
  for (let off = 0, seq = 0; off < body.length; off += BODY_CHUNK_BYTES, seq++) chunks.push({ seq, chunk: body.subarray(off, off + BODY_CHUNK_BYTES) });
  return chunks;
}

export function queueProgram(db: BetterSqlite3.Database): SqliteProgram {
  const keyOf = db.prepare<[string, string], { call_id: string; created_at: number }>('SELECT call_id, created_at FROM mq_keys WHERE fn_id = ? AND key = ?');
  const putKey = db.prepare<[string, string, string, number]>(
    'INSERT INTO mq_keys (fn_id, key, call_id, created_at) VALUES (?, ?, ?, ?) ON CONFLICT (fn_id, key) DO UPDATE SET call_id = excluded.call_id, created_at = excluded.created_at',
  );
  const putChunk = db.prepare<[string, number, Buffer, number]>('INSERT INTO mq_bodies (id, seq, chunk, created_at) VALUES (?, ?, ?, ?)');
  const putItem = db.prepare<{ id: string; fn_id: string; call_json: string; body_bytes: number; max_attempts: number; at: number }>(
    'INSERT INTO mq (id, fn_id, call_json, body_bytes, attempts, max_attempts, state, enqueued_at, available_at, lease_until, leased_by, reason, redeliveries, dead_at) ' +
      "VALUES (@id, @fn_id, @call_json, @body_bytes, 0, @max_attempts, 'ready', @at, @at, 0, NULL, NULL, 0, NULL)",
  );
  // Both branches read mq_state_available_idx in order; SQLite merges them.
  const leasable = db.prepare<{ now: number; n: number }, { id: string; fn_id: string }>(
    "SELECT id, fn_id, available_at, enqueued_at FROM mq WHERE state = 'ready' AND available_at <= @now " +
      "UNION ALL SELECT id, fn_id, available_at, enqueued_at FROM mq WHERE state = 'leased' AND lease_until <= @now " +
      'ORDER BY available_at, enqueued_at LIMIT @n',
  );
  // A lease of an item still `leased` takes back one whose lease ended: counted.
  const lease = db.prepare<{ id: string; until: number; holder: string; now: number }, Omit<LeasedRow, 'body'> & { body_bytes: number }>(
    "UPDATE mq SET redeliveries = CASE WHEN state = 'leased' THEN redeliveries + 1 ELSE redeliveries END, state = 'leased', lease_until = @until, leased_by = @holder " +
      "WHERE id = @id AND ((state = 'ready' AND available_at <= @now) OR (state = 'leased' AND lease_until <= @now)) " +
      'RETURNING id, fn_id, call_json, body_bytes, attempts, max_attempts, redeliveries',
  );
  const chunks = db.prepare<[string], Buffer>('SELECT chunk FROM mq_bodies WHERE id = ? ORDER BY seq').pluck();
  const extend = db.prepare<[number, string]>("UPDATE mq SET lease_until = ? WHERE id = ? AND state = 'leased'");
  const dropItem = db.prepare<[string]>('DELETE FROM mq WHERE id = ?');
  const dropBody = db.prepare<[string]>('DELETE FROM mq_bodies WHERE id = ?');
  const retry = db.prepare<[number, number, string]>("UPDATE mq SET state = 'ready', available_at = ?, lease_until = 0, leased_by = NULL, attempts = attempts + ? WHERE id = ?");
  const dead = db.prepare<[string, number, string]>("UPDATE mq SET state = 'dead', reason = ?, attempts = attempts + 1, lease_until = 0, leased_by = NULL, dead_at = ? WHERE id = ?");
  const redrive = db.prepare<[number, string, string]>(
    "UPDATE mq SET state = 'ready', attempts = 0, redeliveries = 0, available_at = ?, lease_until = 0, leased_by = NULL, reason = NULL, dead_at = NULL WHERE id = ? AND fn_id = ? AND state = 'dead'",
  );
  const holders = db.prepare<[], string>("SELECT DISTINCT leased_by FROM mq WHERE state = 'leased' AND leased_by IS NOT NULL").pluck();
  const release = db.prepare<[string]>("UPDATE mq SET state = 'ready', lease_until = 0, leased_by = NULL, redeliveries = redeliveries + 1 WHERE state = 'leased' AND leased_by = ?");
  const deadBefore = db.prepare<[number], string>("SELECT id FROM mq WHERE state = 'dead' AND dead_at < ?").pluck();
  const dropDead = db.prepare<[string]>("DELETE FROM mq WHERE id = ? AND state = 'dead'");
  const dropOrphans = db.prepare<[number]>('DELETE FROM mq_bodies WHERE created_at < ? AND NOT EXISTS (SELECT 1 FROM mq WHERE mq.id = mq_bodies.id)');
  const dropKeys = db.prepare<[number]>('DELETE FROM mq_keys WHERE created_at <= ?');
  const holds = db.prepare<[string], number>('SELECT 1 FROM mq WHERE id = ?').pluck();
  const size = db.prepare<[], number>("SELECT count(*) FROM mq WHERE state != 'dead'").pluck();
  const oldest = db.prepare<[number], number | null>("SELECT min(available_at) FROM mq WHERE state = 'ready' AND available_at <= ?").pluck();

  return {
    /** Queues an item (or names the earlier call of its idempotency key); resolves with the id that stands for it. */
    enqueue(item: EnqueueArgs, key: string | null, at: number): string {
      if (key !== null) {
        const earlier = keyOf.get(item.fnId, key);
        if (earlier && earlier.created_at > at - IDEMPOTENCY_WINDOW_MS) return earlier.call_id;
        putKey.run(item.fnId, key, item.id, at);
      }
      const body = asBuffer(item.body);
      for (const { seq, chunk } of bodyChunks(body)) putChunk.run(item.id, seq, chunk, at);
      putItem.run({ id: item.id, fn_id: item.fnId, call_json: item.callJson, body_bytes: body.length, max_attempts: item.maxAttempts, at });
      return item.id;
    },
    /** Leases up to `n` items, oldest first (for `leaseMs`, or their fn's time in `leaseByFn`), each with its body in a buffer of its own (handed over, not copied). */
    lease(n: number, leaseMs: number, holder: string, now: number, leaseByFn?: ReadonlyMap<string, number>): LeasedRow[] {
      const leased: LeasedRow[] = [];
      for (const { id, fn_id: fnId } of leasable.all({ now, n })) {
        const row = lease.get({ id, until: now + (leaseByFn?.get(fnId) ?? leaseMs), holder, now });
        if (!row) continue;
        const { body_bytes: bytes, ...rest } = row;
        const body = Buffer.allocUnsafeSlow(bytes);
        let at = 0;
        for (const chunk of chunks.iterate(id)) {
          if (at + chunk.length > bytes) throw new Error(`the queued body of call ${id} is damaged (longer than its ${bytes} bytes)`);
          at += chunk.copy(body, at);
        }
        if (at !== bytes) throw new Error(`the queued body of call ${id} is damaged (${at} of its ${bytes} bytes)`);
        leased.push({ ...rest, body });
      }
      return leased;
    },
    extend(id: string, until: number): void {
      extend.run(until, id);
    },
    /** The item first: a body without its item is a leftover pruneDead removes. */
    ack(id: string): void {
      dropItem.run(id);
      dropBody.run(id);
    },
    retry(id: string, availableAt: number, counted: boolean): void {
      retry.run(availableAt, counted ? 1 : 0, id);
    },
    dead(id: string, reason: string, at: number): void {
      dead.run(reason, at, id);
    },
    redrive(fnId: string, id: string, now: number): boolean {
      return redrive.run(now, id, fnId).changes > 0;
    },
    holders(): string[] {
      return holders.all();
    },
    release(gone: readonly string[]): number {
      let n = 0;
      for (const holder of gone) n += release.run(holder).changes;
      return n;
    },
    /** Dead items dead since before `before`, bodies and all; bodies of enqueues that never finished; keys past their window. */
    pruneDead(before: number, now: number): number {
      let removed = 0;
      for (const id of deadBefore.all(before)) {
        removed += dropDead.run(id).changes;
        dropBody.run(id);
      }
      dropOrphans.run(now - ORPHAN_BODY_MS);
      dropKeys.run(now - IDEMPOTENCY_WINDOW_MS);
      return removed;
    },
    has(ids: readonly string[]): string[] {
      return ids.filter((id) => holds.get(id) !== undefined);
    },
    size(): number {
      return size.get() ?? 0;
    },
    oldestReadyAt(now: number): number | null {
      return oldest.get(now) ?? null;
    },
  };
}
