/**
 * The intake of detached calls on a node that runs them: a call is put in
 * the queue (durable), its record written as `queued`, and the async
 * workers woken, before the caller hears 202.
 */
import type { Logger } from 'pino';
import type { AsyncWorkers } from '../agent/index.js';
import type { CallStore } from '../datastore/index.js';
import { ApiError, ASYNC_MAX_ATTEMPTS_ANNOTATION, callToJson, E, queuedRecord, type Call } from '../models/index.js';
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
  ) {}

  async accept(call: Call, body: Buffer, idempotencyKey?: string): Promise<string> {
    if (idempotencyKey !== undefined && Buffer.byteLength(idempotencyKey) > 255) {
      throw new ApiError(E.InvalidIdempotencyKey);
    }
    let id: string;
    try {
      id = await this.queue.enqueue(
        { id: call.id, fnId: call.fn.fnId, callJson: JSON.stringify(callToJson(call)), body, maxAttempts: maxAttemptsOf(call.fn.annotations) },
        idempotencyKey,
      );
    } catch (err) {
      this.log.error({ err, call: call.id }, 'could not queue a detached call');
      throw new ApiError(E.CallNotQueued, { cause: err });
    }
    // The same submission again: the earlier call stands for it.
    if (id !== call.id) return id;
    // The call is safe in the queue; its record is a convenience that must not fail the answer.
    await this.calls?.insert([queuedRecord(call)]).catch((err: unknown) => this.log.warn({ err, call: call.id }, 'could not record a queued call'));
    this.workers?.notify();
    return id;
  }
}
