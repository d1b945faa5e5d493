/**
 * The call recorder: a call listener that keeps every call's record and
 * log in the CallStore, written off the call path in batches (a call only
 * appends to a buffer), and removes records past their retention.
 *
 *   onCallEnd / onCallLog -> buffer -> every FLUSH_MS, or at MAX_BATCH -> one transaction
 */
import type { Logger } from 'pino';
import type { CallListener } from '../agent/index.js';
import type { CallLogEntry, CallStore } from '../datastore/index.js';
import { callRecord, type Call, type CallOutcome, type CallRecord } from '../models/index.js';

const FLUSH_MS = 100;
const MAX_BATCH = 500;
const PRUNE_EVERY_MS = 60_000;

export interface CallRecorderOptions {
  readonly store: CallStore;
  readonly log: Logger;
  /** Records older than this are removed. */
  readonly retentionMs: number;
  /** At most this many records are kept per fn. */
  readonly perFn: number;
}

export class CallRecorder implements CallListener {
  private records: CallRecord[] = [];
  private logs: CallLogEntry[] = [];
  private timer: NodeJS.Timeout | undefined;
  /** The flush in progress: flushes run one at a time, in order. */
  private writing: Promise<void> = Promise.resolve();
  private readonly pruner: NodeJS.Timeout;
  private closed = false;

  constructor(private readonly o: CallRecorderOptions) {
    this.pruner = setInterval(() => void this.prune(), PRUNE_EVERY_MS);
    this.pruner.unref();
  }

  onCallEnd(call: Call, outcome: CallOutcome): void {
    // A detached call's records are its worker's: stored before the queue lets go of it.
    if (call.type === 'detached') return;
    this.records.push(callRecord(call, outcome));
    this.schedule();
  }

  onCallLog(call: Call, log: string): void {
    if (log === '') return;
    this.logs.push({ callId: call.id, fnId: call.fn.fnId, log });
    this.schedule();
  }

  private schedule(): void {
    if (this.records.length + this.logs.length >= MAX_BATCH) {
      void this.flush();
      return;
    }
    if (this.timer || this.closed) return;
    this.timer = setTimeout(() => void this.flush(), FLUSH_MS);
    this.timer.unref();
  }

  /** Writes what is buffered; resolves when it is stored (or, if the store refused it, logged and dropped). Never rejects. */
  flush(): Promise<void> {
    clearTimeout(this.timer);
    this.timer = undefined;
    const records = this.records;
    const logs = this.logs;
    if (records.length === 0 && logs.length === 0) return this.writing;
    this.records = [];
    this.logs = [];
    this.writing = this.writing.then(async () => {
      try {
        await this.o.store.insertCalls(records);
        await this.o.store.insertLogs(logs);
      } catch (err) {
        this.o.log.error({ err, records: records.length, logs: logs.length }, 'could not store call records; they are lost');
      }
    });
    return this.writing;
  }

  /** Removes records past the retention (and beyond the per-fn cap). Never rejects. */
  async prune(): Promise<number> {
    try {
      const removed = await this.o.store.prune(new Date(Date.now() - this.o.retentionMs).toISOString(), this.o.perFn);
      if (removed > 0) this.o.log.debug({ removed }, 'removed call records past their retention');
      return removed;
    } catch (err) {
      this.o.log.warn({ err }, 'could not remove old call records');
      return 0;
    }
  }

  /** Stores what is buffered and stops. Idempotent. */
  async close(): Promise<void> {
    this.closed = true;
    clearInterval(this.pruner);
    await this.flush();
  }
}
