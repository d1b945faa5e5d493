/**
 * The call recorder: a call listener that keeps every call's record and
 * log in the CallStore, written off the call path in batches (a call only
 * appends to a buffer), and removes records past their retention.
 *
 *   onCallEnd / onCallLog -> buffer -> every FLUSH_MS, or at MAX_BATCH -> one transaction
 *
 * A batch takes everything buffered when its turn to be written comes, so
 * batches grow when the store is slow. Memory stays bounded: past
 * MAX_PENDING records and logs waiting, new ones are dropped and counted,
 * and the count is logged.
 */
import type { Logger } from 'pino';
import type { CallListener } from '../agent/index.js';
import type { CallLogEntry, CallStore } from '../datastore/index.js';
import { callRecord, type Call, type CallOutcome } from '../models/index.js';

const FLUSH_MS = 100;
const MAX_BATCH = 500;
const PRUNE_EVERY_MS = 60_000;
const MAX_PENDING = 100_000;
const DROP_REPORT_MS = 10_000;

export interface CallRecorderOptions {
  /** Where records go: this node's store, or (on an LB) the API node's. */
  readonly store: Pick<CallStore, 'insertSerialized' | 'prune'>;
  readonly log: Logger;
  /** Records older than this are removed. */
  readonly retentionMs: number;
  /** At most this many records are kept per fn. */
  readonly perFn: number;
  /** At most this many records and logs wait for the store; more are dropped (default MAX_PENDING). */
  readonly maxPending?: number;
}

export class CallRecorder implements CallListener {
  /** Records as JSON: serialized at call end, so the objects die young. */
  private records: string[] = [];
  private logs: CallLogEntry[] = [];
  private timer: NodeJS.Timeout | undefined;
  /** The flush in progress: flushes run one at a time, in order. */
  private writing: Promise<void> = Promise.resolve();
  private readonly pruner: NodeJS.Timeout;
  private closed = false;
  /** Records and logs handed to the store and not yet stored. */
  private inFlight = 0;
  private dropped = 0;
  /** A write is queued that has not taken the buffer yet. */
  private queued = false;
  private lastDropReport = 0;

  constructor(private readonly o: CallRecorderOptions) {
    this.pruner = setInterval(() => void this.prune(), PRUNE_EVERY_MS);
    this.pruner.unref();
  }

  onCallEnd(call: Call, outcome: CallOutcome): void {
    // A detached call's records are its worker's: stored before the queue lets go of it.
    if (call.type === 'detached' || this.full()) return;
    this.records.push(JSON.stringify(callRecord(call, outcome)));
    this.schedule();
  }

  onCallLog(call: Call, log: string): void {
    // A detached call's log goes with its record, written by its worker.
    if (call.type === 'detached' || log === '' || this.full()) return;
    this.logs.push({ callId: call.id, fnId: call.fn.fnId, appId: call.fn.appId, created: call.createdAt, log });
    this.schedule();
  }

  /** Whether the store is so far behind that one more item would be dropped (and counted). */
  private full(): boolean {
    if (this.records.length + this.logs.length + this.inFlight < (this.o.maxPending ?? MAX_PENDING)) return false;
    this.dropped++;
    const now = Date.now();
    if (now - this.lastDropReport >= DROP_REPORT_MS) {
      this.lastDropReport = now;
      this.o.log.error({ dropped: this.dropped, waiting: this.o.maxPending ?? MAX_PENDING }, 'the call record store is too far behind: call records and logs are being dropped');
    }
    return true;
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
    if ((this.records.length === 0 && this.logs.length === 0) || this.queued) return this.writing;
    this.queued = true;
    this.writing = this.writing.then(() => this.write());
    return this.writing;
  }

  /** One batch: everything buffered by now (a flush queued behind a slow write finds it already taken). */
  private async write(): Promise<void> {
    this.queued = false;
    const records = this.records;
    const logs = this.logs;
    if (records.length === 0 && logs.length === 0) return;
    this.records = [];
    this.logs = [];
    this.inFlight += records.length + logs.length;
    try {
      await this.o.store.insertSerialized(records, logs);
    } catch (err) {
      this.o.log.error({ err, records: records.length, logs: logs.length }, 'could not store call records; they are lost');
    } finally {
      this.inFlight -= records.length + logs.length;
    }
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
