/**
 * The call recorder: a call listener that keeps every call's record and
 * log in the CallStore, written off the call path in batches (a call only
 * appends to a buffer), and removes records past their retention.
 *
 *   onCallEnd / onCallLog -> buffer -> every FLUSH_MS, or at MAX_BATCH -> one transaction
 *
 * A record never says a call ended before its log can be read: the record
 * of a call whose log follows (onCallEnd's logFollows) waits for it, and
 * the two go into the buffer together (so into one transaction).
 *
 * A batch takes everything buffered when its turn to be written comes, so
 * batches grow when the store is slow. A batch the store has no room for
 * (the database's disk is full: StorageFullError) or that the database did
 * not answer (a database server down or restarting: DatabaseUnavailableError)
 * goes back to the front of the buffer and is tried again every RETRY_MS
 * until it is stored:
 *
 *   writing ──full, or unavailable──> waiting (log: how many wait) ──RETRY_MS──> writing
 *      ^                                                                    │ stored
 *      └──────────────────── (log: the waiting ones are stored) <───────────┘
 *
 * Memory stays bounded: past MAX_PENDING records and logs waiting, new ones
 * are dropped and counted, and the count is logged. A batch the store
 * refuses for another reason is logged and dropped: trying it again would
 * hold up every record behind it.
 */
import type { Logger } from 'pino';
import type { CallListener } from '../agent/index.js';
import { DatabaseUnavailableError, StorageFullError, type CallLogEntry, type CallStore } from '../datastore/index.js';
import { callRecord, type Call, type CallOutcome } from '../models/index.js';

/** Why records wait in memory, in the log's words. */
interface WaitReason {
  readonly cause: string;
  readonly until: string;
  readonly back: string;
  readonly atShutdown: string;
}
const FULL: WaitReason = { cause: "the database's disk is full", until: 'it has room', back: 'the database has room again', atShutdown: "the database's disk is still full at shutdown" };
const DOWN: WaitReason = { cause: 'the database does not answer', until: 'it answers', back: 'the database answers again', atShutdown: 'the database still does not answer at shutdown' };

const FLUSH_MS = 100;
const MAX_BATCH = 500;
const PRUNE_EVERY_MS = 60_000;
const MAX_PENDING = 100_000;
/** How often dropped and waiting records are reported while it lasts. */
const REPORT_MS = 10_000;
/** How often records waiting for room are tried again. */
const RETRY_MS = 1000;
/** A record whose log was announced and has not come this long after is stored without it. */
const LOG_WAIT_MS = 10_000;

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
  /** Records of calls whose log follows, by call id: stored with it. */
  private readonly awaitingLog = new Map<string, { readonly record: string; readonly at: number }>();
  private logWait: NodeJS.Timeout | undefined;
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
  /** Since when the store has had no room (records wait in memory); undefined while it takes them. */
  private waitingSince: number | undefined;
  private lastWaitReport = 0;
  private retry: NodeJS.Timeout | undefined;
  /** Why records last waited. */
  private waitingFor: WaitReason = FULL;

  constructor(private readonly o: CallRecorderOptions) {
    this.pruner = setInterval(() => void this.prune(), PRUNE_EVERY_MS);
    this.pruner.unref();
  }

  onCallEnd(call: Call, outcome: CallOutcome, logFollows?: boolean): void {
    // A detached call's records are its worker's: stored before the queue lets go of it.
    if (call.type === 'detached' || this.full()) return;
    const record = JSON.stringify(callRecord(call, outcome));
    if (logFollows && !this.closed) {
      this.awaitingLog.set(call.id, { record, at: Date.now() });
      this.logWait ??= setInterval(() => this.releaseOverdue(), LOG_WAIT_MS).unref();
      return;
    }
    this.records.push(record);
    this.schedule();
  }

  onCallLog(call: Call, log: string): void {
    // A detached call's log goes with its record, written by its worker.
    if (call.type === 'detached') return;
    const waiting = this.awaitingLog.get(call.id);
    if (waiting) {
      this.awaitingLog.delete(call.id);
      this.records.push(waiting.record);
    }
    if (log !== '' && !this.full()) this.logs.push({ callId: call.id, fnId: call.fn.fnId, appId: call.fn.appId, created: call.createdAt, log });
    if (waiting || log !== '') this.schedule();
  }

  /** Records whose log has not come in LOG_WAIT_MS (or all, at `now` = Infinity) go without it. */
  private releaseOverdue(now = Date.now()): void {
    for (const [id, { record, at }] of this.awaitingLog) {
      if (now - at < LOG_WAIT_MS) continue;
      this.awaitingLog.delete(id);
      this.records.push(record);
    }
    if (this.awaitingLog.size === 0) {
      clearInterval(this.logWait);
      this.logWait = undefined;
    }
    this.schedule();
  }

  private get pending(): number {
    return this.records.length + this.logs.length + this.inFlight + this.awaitingLog.size;
  }

  /** Whether the store is so far behind that one more item would be dropped (and counted). */
  private full(): boolean {
    const max = this.o.maxPending ?? MAX_PENDING;
    if (this.pending < max) return false;
    this.dropped++;
    const now = Date.now();
    if (now - this.lastDropReport >= REPORT_MS) {
      this.lastDropReport = now;
      const why = this.waitingSince === undefined ? 'the call record store is too far behind' : "the database's disk is full";
      this.o.log.error({ dropped: this.dropped, waiting: max }, `${why} and ${max} call records and logs already wait in memory: new ones are dropped (${this.dropped} so far)`);
    }
    return true;
  }

  private schedule(): void {
    // Waiting for room: the retry timer writes next.
    if (this.waitingSince !== undefined) return;
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
      if (this.waitingSince !== undefined) {
        this.waitingSince = undefined;
        this.o.log.info({ records: records.length, logs: logs.length }, `${this.waitingFor.back}: the call records that waited in memory are stored (${records.length} records, ${logs.length} logs)`);
        // What came in while this batch was written waited for it.
        if (this.records.length + this.logs.length > 0) this.schedule();
      }
    } catch (err) {
      const why = err instanceof StorageFullError ? FULL : err instanceof DatabaseUnavailableError ? DOWN : undefined;
      if (why === undefined) {
        this.o.log.error({ err, records: records.length, logs: logs.length }, 'could not store call records; they are lost');
      } else if (this.closed) {
        this.o.log.error({ records: records.length, logs: logs.length }, `${why.atShutdown}: the call records that waited in memory are lost (${records.length} records, ${logs.length} logs)`);
      } else {
        // Back in front of what came since, in order: tried again once the retry timer fires.
        this.records = records.concat(this.records);
        this.logs = logs.concat(this.logs);
        this.wait(why);
      }
    } finally {
      this.inFlight -= records.length + logs.length;
    }
  }

  /** The store has no room, or does not answer (`why`): records wait in memory; the log says how many, when it begins and every REPORT_MS. */
  private wait(why: WaitReason): void {
    const now = Date.now();
    const waiting = this.records.length + this.logs.length;
    const max = this.o.maxPending ?? MAX_PENDING;
    if (this.waitingSince === undefined || now - this.lastWaitReport >= REPORT_MS) {
      this.lastWaitReport = now;
      this.o.log.warn(
        { waiting, max, since: new Date((this.waitingSince ??= now)).toISOString() },
        `${why.cause}: call records wait in memory until ${why.until} (${waiting} records and logs waiting; past ${max}, new ones are dropped)`,
      );
    }
    clearTimeout(this.retry);
    this.waitingFor = why;
    this.retry = setTimeout(() => void this.flush(), RETRY_MS);
    this.retry.unref();
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

  /** Stores what is buffered (what the disk has no room for is lost, and logged) and stops. Idempotent. */
  async close(): Promise<void> {
    this.closed = true;
    clearInterval(this.pruner);
    clearTimeout(this.retry);
    this.releaseOverdue(Infinity);
    await this.flush();
  }
}
