/**
 * Detached calls on a node that keeps them: the intake that queues them,
 * and the reconciler that keeps their records true to the queue.
 *
 * The intake puts a call in the queue (durable), writes its record as
 * `queued` and wakes the async workers, before the caller hears 202.
 *
 * The reconciler runs where both the records and the queue are seen (a full
 * node; an API node with FN_MQ_URL, whose Redis the LBs share). Every
 * RECONCILE_EVERY_MS it
 *   - finds records still `queued` (older than RECONCILE_GRACE_MS) whose
 *     call the queue does not hold in any state: the queue lost it (a Redis
 *     without persistence restarted, a database restored from an older
 *     copy). Its body was only in the queue, so it cannot run again: its
 *     record says `error`, with the reason, rather than `queued` forever;
 *   - removes dead calls past the call retention, bodies and all (their
 *     records go at the same age, and with them the way to redrive them).
 * Every step is conditional (a record is written over only while it is
 * still `queued`; a dead item is removed only while dead), so several such
 * nodes may run it at once.
 */
import type { Logger } from 'pino';
import type { AsyncWorkers } from '../agent/index.js';
import type { CallStore } from '../datastore/index.js';
import { ApiError, ASYNC_MAX_ATTEMPTS_ANNOTATION, callToJson, E, queuedRecord, type Call, type CallRecord } from '../models/index.js';
import type { Queue } from '../mq/index.js';
import type { DetachedIntake } from './invoke.js';

export const DEFAULT_ASYNC_MAX_ATTEMPTS = 3;

export function maxAttemptsOf(annotations: Readonly<Record<string, unknown>>): number {
  // Validated when the fn was saved (models/fn.ts).
  const v = annotations[ASYNC_MAX_ATTEMPTS_ANNOTATION];
  return typeof v === 'number' ? v : DEFAULT_ASYNC_MAX_ATTEMPTS;
}

export class QueueIntake implements DetachedIntake {
  constructor(
    private readonly queue: Queue,
    private readonly calls: Pick<CallStore, 'insert'> | undefined,
    private readonly workers: AsyncWorkers | undefined,
    private readonly log: Logger,
    readonly maxBodyBytes: number,
  ) {}

  async accept(call: Call, body: Buffer, idempotencyKey?: string): Promise<string> {
    if (idempotencyKey !== undefined && Buffer.byteLength(idempotencyKey) > 255) {
      throw new ApiError(E.InvalidIdempotencyKey);
    }
    const item = { id: call.id, fnId: call.fn.fnId, callJson: JSON.stringify(callToJson(call)), body, maxAttempts: maxAttemptsOf(call.fn.annotations) };
    // The call is safe once in the queue; its record is a convenience that must not fail the answer.
    const recordFailed = (err: unknown): void => this.log.warn({ err, call: call.id }, 'could not record a queued call');
    // Without a key the call is queued under its own id: its record is written at the same time
    // (one batch of the SQLite writer thread, or two round trips at once), not after.
    const recorded = idempotencyKey === undefined ? this.calls?.insert([queuedRecord(call)]).then(() => true, recordFailed) : undefined;
    let id: string;
    try {
      const queued = this.queue.enqueue(item, idempotencyKey);
      id = await (this.workers ? this.workers.accepting(queued) : queued);
    } catch (err) {
      this.log.error({ err, call: call.id }, 'could not queue a detached call');
      // The caller hears 503; a record already written must not say `queued`.
      if ((await recorded) === true) await this.calls?.insert([{ ...queuedRecord(call, 0, E.CallNotQueued.message), status: 'error', completed_at: new Date().toISOString() }]).catch(recordFailed);
      throw new ApiError(E.CallNotQueued, { cause: err });
    }
    // The same submission again: the earlier call stands for it.
    if (id !== call.id) return id;
    await (recorded ?? this.calls?.insert([queuedRecord(call)]).catch(recordFailed));
    this.workers?.notify();
    return id;
  }
}

/** How often the reconciler looks. */
export const RECONCILE_EVERY_MS = 60_000;
/**
 * A `queued` record younger than this is left alone: its call may be on its
 * way into the queue (an LB writes the record over HTTP after enqueueing).
 */
export const RECONCILE_GRACE_MS = 60_000;
/** Records looked at per step. */
const RECONCILE_BATCH = 500;

/** The reason a lost call's record gives. */
export const LOST_REASON =
  'The call was accepted but its queue no longer holds it (was the queue lost, say a Redis server without an append-only file restarted?); it did not run and cannot run again: send it again';

export interface ReconcilerOptions {
  readonly queue: Pick<Queue, 'has' | 'pruneDead'>;
  /** The call records; undefined when none are kept (FNTS_CALL_RECORDS=off): then only dead calls are pruned. */
  readonly calls: Pick<CallStore, 'queuedBefore' | 'replaceQueued'> | undefined;
  readonly log: Logger;
  /** FN_CALL_RETENTION: dead calls older than this are removed. */
  readonly retentionMs: number;
  readonly everyMs?: number;
  readonly graceMs?: number;
  readonly now?: () => number;
}

export class QueueReconciler {
  private timer: NodeJS.Timeout | undefined;
  private pass: Promise<unknown> = Promise.resolve();
  private closed = false;

  constructor(private readonly o: ReconcilerOptions) {}

  /** Looks now, then every `everyMs`. */
  start(): void {
    const tick = (): void => {
      this.timer = undefined;
      if (this.closed) return;
      this.pass = this.runOnce()
        .catch((err: unknown) => this.o.log.warn({ err }, 'could not reconcile the records of detached calls with their queue; trying again later'))
        .finally(() => {
          if (!this.closed) this.timer = setTimeout(tick, this.o.everyMs ?? RECONCILE_EVERY_MS).unref();
        });
    };
    tick();
  }

  /** One pass: resolves with how many lost calls were marked failed and how many dead calls were removed. */
  async runOnce(): Promise<{ lost: number; pruned: number }> {
    const now = (this.o.now ?? Date.now)();
    const pruned = await this.o.queue.pruneDead(now - this.o.retentionMs);
    if (pruned > 0) this.o.log.info({ pruned }, 'removed dead detached calls past the call retention');
    const lost = this.o.calls ? await this.failLost(this.o.calls, new Date(now - (this.o.graceMs ?? RECONCILE_GRACE_MS)).toISOString(), now) : 0;
    if (lost > 0) this.o.log.error({ lost }, 'detached calls were accepted but are no longer in their queue (lost with it): their records now say error');
    return { lost, pruned };
  }

  private async failLost(calls: NonNullable<ReconcilerOptions['calls']>, before: string, now: number): Promise<number> {
    let lost = 0;
    let after: { createdAt: string; id: string } | undefined;
    for (;;) {
      const queued = await calls.queuedBefore(before, RECONCILE_BATCH, after);
      if (queued.length === 0) return lost;
      const held = await this.o.queue.has(queued.map((r) => r.id));
      const gone: CallRecord[] = queued.filter((r) => !held.has(r.id)).map((r) => ({ ...r, status: 'error', error: LOST_REASON, completed_at: new Date(now).toISOString() }));
      lost += await calls.replaceQueued(gone);
      if (queued.length < RECONCILE_BATCH) return lost;
      const last = queued[queued.length - 1]!;
      after = { createdAt: last.created_at, id: last.id };
    }
  }

  /** Stops looking; a pass in progress finishes. Idempotent. */
  async close(): Promise<void> {
    this.closed = true;
    clearTimeout(this.timer);
    await this.pass;
  }
}
