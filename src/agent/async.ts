/**
 * The agent's async workers (as Fn's agent: "check the mq for any async
 * calls, and submit them"): while the resource tracker's async area is below
 * its high-water mark, lease the oldest detached calls from the queue (up to
 * LEASE_BATCH a round trip), run each
 * as `detached` (async area only, never the sync reserve), keep its lease
 * alive while it runs, then settle it:
 *
 *   succeeded, or refused for the caller's fault (4xx)  -> ack
 *   "server too busy"                                    -> ready again, no attempt counted
 *   failed by the function (5xx, crash, OOM, timeout)    -> retry after a backoff with jitter,
 *                                                           or dead after its last attempt
 *
 * A worker that dies leaves its leases to expire (or to releaseDead at the
 * next start): the calls run again (at-least-once), and the queue counts
 * each such redelivery. A call whose deliveries ended with the process
 * dying `maxRedeliveries` times is a poison call: it is dead-lettered
 * before it runs again, so a call that kills its server cannot keep it in
 * a crash loop. Records of the call (queued between attempts, its final
 * outcome with the attempt count), each with the log of the attempt that
 * led to it, go to `record`.
 */
import type { Logger } from 'pino';
import { ApiError, callFromJson, callRecord, E, FnInterner, queuedRecord, type Call, type CallOutcome, type CallRecord } from '../models/index.js';
import type { Queue, QueuedCall } from '../mq/index.js';
import type { Invoker } from '../call/index.js';
import { instanceAlive } from './owner.js';
import type { ResourceTracker } from './resource.js';

/** Added to a call's timeout for its lease: a worker alive renews it long before. */
const LEASE_HEADROOM_MS = 30_000;
/** The lease of a call of a fn the workers have not run lately: cut to the call's own (an extend) once its timeout is read. */
const FIRST_LEASE_MS = 5 * 60_000;
/** Fns whose calls' lease the workers remember (the most recently run): their calls are leased for it from the start. */
const LEASE_FNS = 32;
/** How often the workers look for calls held by servers (sharing the queue) that died. */
const RELEASE_DEAD_EVERY_MS = 5000;
const IDLE_POLL_MS = 200;
/**
 * Calls running at once (leased and not yet answered) follow the async
 * area's memory: each needs a container of its fn's memory (a container
 * runs one call at a time), so the workers keep in flight as many as the
 * area holds containers of the fn read last (and its CPU, when it asks for
 * some), between 1 and MAX_IN_FLIGHT; how full the area is now is
 * waitAsyncCapacity's part (no lease while it is above its high-water
 * mark). A big node drains wide; a small one does not lease calls that
 * would only wait for room, their lease running. An LB (no tracker: its
 * runners' memory is theirs) dispatches up to FIXED_WIDTH.
 */
const MAX_IN_FLIGHT = 512;
const MIB = 1024 * 1024;
/** What a call is taken to need before the workers have read any: Fn's default memory for a fn (128 MB). */
const DEFAULT_CALL_BYTES = 128 * MIB;
/** The width an LB dispatches at, and the one the sync-first share divides beside callers waiting (see SYNC_WEIGHT), whatever the memory. */
const FIXED_WIDTH = 64;
/** Calls leased per round trip to the queue, at most. */
const LEASE_BATCH = 16;
/**
 * Leases under way at once while a backlog lasts (the last lease came back
 * full) and fewer than half the calls the workers may have in flight are
 * leased and unanswered (the leases do not keep up); otherwise one. A
 * lease is a few round trips to the database (on MySQL, ~12 ms for 16
 * calls under a drain's load): one at a time, the containers ran out of
 * calls while the next was read, the CPU a quarter idle. Where leases keep
 * up (SQLite's writer thread, ~3 ms), more at once only cost CPU.
 */
const LEASES_AT_ONCE = 3;
/**
 * While calls run, the workers lease again only once this share of the
 * calls they may have in flight (at most LEASE_BATCH) has ended: a backlog
 * drains in batches, not one lease (a few round trips) per call that ends.
 */
const REFILL_SHARE = 1 / 4;
/**
 * Callers waiting come first: while sync calls run or detached calls are
 * being accepted (stored before their 202: see accepting), detached calls
 * in flight (running, or answered and still being settled: their record
 * and the queue's round trips take the CPU the callers need) are held to
 * 1 / (1 / width + SYNC_WEIGHT x L / FIXED_WIDTH), at least one, where
 * width is the memory's (MAX_IN_FLIGHT) and L the sync calls and accepts
 * in flight (counted at once as they rise, falling over about
 * SYNC_LOAD_TAU_MS after): at a width of 64, 64 / (1 + 2L). A backlog
 * drains on the capacity the callers leave rather than slowing them (16
 * in flight: one or two detached calls; none: the memory's width).
 */
const SYNC_WEIGHT = 2;
const SYNC_LOAD_TAU_MS = 500;
/**
 * Calls answered and being settled (their log awaited, record stored, queue
 * told) at once: settling holds no container, so it does not count against
 * MAX_IN_FLIGHT, but a slow store must still stop the leasing.
 */
const MAX_SETTLING = 1024;

/** FNTS_ASYNC_MAX_REDELIVERIES' default. */
export const DEFAULT_MAX_REDELIVERIES = 3;

/** Exponential backoff with full jitter: up to 1 s, 2 s, 4 s ... (at most a minute) after attempt n. */
export function retryDelayMs(attempt: number, random: () => number = Math.random): number {
  const ceiling = Math.min(60_000, 1000 * 2 ** Math.max(0, attempt - 1));
  return Math.round(ceiling / 2 + (random() * ceiling) / 2);
}

export interface AsyncWorkersOptions {
  readonly invoker: Invoker;
  readonly queue: Queue;
  /** Leasing waits while this says the async area is full (an LB, with no tracker of its own, never waits). */
  readonly resources: Pick<ResourceTracker, 'waitAsyncCapacity'> & Partial<Pick<ResourceTracker, 'snapshot'>>;
  readonly log: Logger;
  /**
   * Stores a record of the call: queued between attempts, and the last
   * outcome, each with the log of the attempt that led to it (when it wrote
   * any), in one write: a record that says the call ended never comes
   * before its log. Awaited before the queue is told: a call is
   * acknowledged only once its outcome is stored (a crash in between runs
   * it again).
   */
  readonly record: (record: CallRecord, log?: string) => Promise<void>;
  /**
   * FNTS_ASYNC_MAX_REDELIVERIES (3): a call whose lease was taken back from
   * a dead holder this many times is dead-lettered instead of run again.
   */
  readonly maxRedeliveries?: number;
  /** This process (owner.ts's instance): the holder of its leases. */
  readonly instance: string;
  /** Tells whether another instance's process runs (default: owner.ts's instanceAlive). */
  readonly isInstanceAlive?: (instance: string) => boolean | undefined;
  /** Told when a call the function failed goes back to run again, and when it is dead-lettered (metrics). Must not throw. */
  readonly events?: { onRetry?(call: Call): void; onDead?(call: Call): void };
}

export class AsyncWorkers {
  private readonly stop = new AbortController();
  /** Calls leased and not yet answered. */
  private readonly running = new Set<Promise<void>>();
  /** Calls answered, being settled. */
  private readonly settling = new Set<Promise<void>>();
  /** Leases under way (see LEASES_AT_ONCE), and the calls they asked for. */
  private readonly leases = new Set<Promise<void>>();
  private asked = 0;
  /** The last lease came back full: a backlog, leased by up to LEASES_AT_ONCE leases at once. */
  private backlog = false;
  /** No lease before this (performance.now()): the queue came back empty, or failed. */
  private restUntil = 0;
  private wake: (() => void) | undefined;
  /** The run loop waiting for a call to end (see callEndedOrSoon). */
  private callEnded: (() => void) | undefined;
  private loop: Promise<void> | undefined;
  private reaper: NodeJS.Timeout | undefined;
  private releasing = false;
  /** Sync calls in flight: the latest count, or a decaying average of the past while higher (see SYNC_WEIGHT). */
  private syncLoad = 0;
  /** Detached calls being accepted (stored, their caller waiting for the 202): see accepting. */
  private accepts = 0;
  private syncSampledAt = performance.now();
  /**
   * The lease a call of each fn run lately needs (its timeout and
   * LEASE_HEADROOM_MS), most recent last: reserveBatch leases its calls for
   * that at once, so they run without an extend first, and a server that
   * dies leaves them for no longer than it would have after that extend.
   */
  private readonly fnLeases = new Map<string, number>();
  /** The calls of one fn share one CallFn: the agent's work per fn (its spec, slot key) is kept with it. */
  private readonly fns = new FnInterner();
  /** What the call read last needs (its fn's memory and CPU): the measure of the free area in memoryWidth. */
  private callNeeds = { bytes: DEFAULT_CALL_BYTES, cpuMillis: 0 };

  constructor(private readonly o: AsyncWorkersOptions) {}

  /** How many detached calls may be in flight now: fewer while sync calls run (see SYNC_WEIGHT). */
  private inFlightCap(): number {
    const now = performance.now();
    const weight = 1 - Math.exp(-(now - this.syncSampledAt) / SYNC_LOAD_TAU_MS);
    this.syncSampledAt = now;
    const inFlight = (this.o.invoker.syncInFlight?.() ?? 0) + this.accepts;
    // Up at once with the sync load, down slowly after it.
    this.syncLoad = Math.max(inFlight, this.syncLoad + (inFlight - this.syncLoad) * weight);
    // The memory's width alone; beside callers, as many as FIXED_WIDTH / (1 + SYNC_WEIGHT x load) would be at that width.
    return Math.max(1, Math.floor(1 / (1 / this.memoryWidth() + (SYNC_WEIGHT * this.syncLoad) / FIXED_WIDTH)));
  }

  /** How many containers of the last call's fn the async area holds (see MAX_IN_FLIGHT). */
  private memoryWidth(): number {
    const snapshot = this.o.resources.snapshot?.();
    if (!snapshot) return FIXED_WIDTH;
    const { memory, cpu } = snapshot;
    let width = Math.floor(memory.asyncTotal / this.callNeeds.bytes);
    if (this.callNeeds.cpuMillis > 0) width = Math.min(width, Math.floor(cpu.asyncTotal / this.callNeeds.cpuMillis));
    return Math.max(1, Math.min(MAX_IN_FLIGHT, width));
  }

  /**
   * Takes back the calls a dead instance of this server held (killed
   * mid-call), then starts leasing; and looks again every
   * RELEASE_DEAD_EVERY_MS: servers sharing a queue (one database) take
   * over at once the calls of one of them that died on this host. A holder
   * on another host is not known dead here: its calls wait for their
   * leases to end (the fn's timeout plus 30 s).
   */
  start(): void {
    this.loop ??= (async () => {
      await this.releaseDead();
      this.reaper = setInterval(() => void this.releaseDead(), RELEASE_DEAD_EVERY_MS);
      this.reaper.unref();
      await this.run();
    })().catch((err: unknown) => this.o.log.error({ err }, 'the async worker stopped unexpectedly'));
  }

  /** One look for the leases of dead holders; never rejects, never two at once. */
  private async releaseDead(): Promise<void> {
    if (this.releasing || this.stop.signal.aborted) return;
    this.releasing = true;
    const alive = this.o.isInstanceAlive ?? instanceAlive;
    try {
      const released = await this.o.queue.releaseDead((holder) => holder !== this.o.instance && alive(holder) === false);
      if (released > 0) {
        this.o.log.info({ released }, 'detached calls of a server that died run again');
        this.notify();
      }
    } catch (err) {
      this.o.log.warn({ err }, 'could not take back the calls of a server that died; they run again when their leases end');
    } finally {
      this.releasing = false;
    }
  }

  /**
   * Counts `storing` (a detached call being accepted) as a caller waiting
   * until it settles: while accepts pour in, the drain holds back as it does
   * for sync calls, so the CPU goes to answering them 202 (the calls run
   * once the burst passes) rather than to running the calls of the burst.
   */
  async accepting<T>(storing: Promise<T>): Promise<T> {
    this.accepts++;
    try {
      return await storing;
    } finally {
      this.accepts--;
    }
  }

  /** A call was just queued: look now rather than at the next poll. */
  notify(): void {
    this.restUntil = 0;
    this.wake?.();
  }

  private async pause(ms: number): Promise<void> {
    // Stopped while leasing: an abort listener added now would never be told, and the (unref'd)
    // timer alone would let the process end in the middle of its shutdown, the last records unwritten.
    if (this.stop.signal.aborted) return;
    await new Promise<void>((resolve) => {
      const timer = setTimeout(done, ms);
      timer.unref();
      const signal = this.stop.signal;
      function done(): void {
        clearTimeout(timer);
        signal.removeEventListener('abort', done);
        resolve();
      }
      this.wake = done;
      signal.addEventListener('abort', done, { once: true });
    });
    this.wake = undefined;
  }

  private async run(): Promise<void> {
    const signal = this.stop.signal;
    while (!signal.aborted) {
      const rest = this.restUntil - performance.now();
      if (rest > 0) {
        await this.pause(rest);
        continue;
      }
      try {
        await this.o.resources.waitAsyncCapacity(signal);
      } catch {
        return;
      }
      const cap = this.inFlightCap();
      // While callers wait, a detached call counts until it is settled, not only until it is
      // answered: its settling (the record, the queue's round trips) takes the CPU they need.
      // Calls asked for by the leases under way count as running.
      const counted = this.running.size + this.asked + (this.syncLoad >= 1 ? this.settling.size : 0);
      const refill = Math.min(LEASE_BATCH, Math.ceil(cap * REFILL_SHARE));
      // Looked at again when a call or a lease ends, or soon (the sync load may have passed).
      // More than one lease at once only while a backlog lasts and the calls leased run low (the leases are slower than the calls).
      const leasesAtOnce = this.backlog && this.running.size < cap / 2 ? LEASES_AT_ONCE : 1;
      if (counted > cap - refill || this.settling.size >= MAX_SETTLING || this.leases.size >= leasesAtOnce) {
        await this.callEndedOrSoon();
        continue;
      }
      this.lease(Math.min(LEASE_BATCH, cap - counted));
    }
  }

  /**
   * One lease of up to `n` calls, under way beside others (see
   * LEASES_AT_ONCE); its calls start as soon as it answers, each in a turn
   * of the event loop of its own: started together, a lease's 16 calls (each
   * read from its JSON and handed to the agent) held whatever came in
   * meanwhile (a container's answer, a sync call) behind them all. MySQL
   * drains in six paired runs: 1,109-1,416 calls/s, 1,225 on average, one a
   * turn; 1,001-1,243, 1,146, all at once (Postgres: no difference in two).
   * An empty answer rests the leasing IDLE_POLL_MS (a call queued meanwhile
   * ends the rest: notify), a failure a second.
   */
  private lease(n: number): void {
    this.asked += n;
    // What each item is leased for: its fn's known lease, else a generous one cut to the call's own once it is read.
    const leases = new Map(this.fnLeases);
    const job = (async () => {
      let items: QueuedCall[];
      try {
        items = await this.o.queue.reserveBatch(n, FIRST_LEASE_MS, this.o.instance, leases);
      } catch (err) {
        this.asked -= n;
        this.o.log.error({ err }, 'could not read the queue of detached calls');
        this.backlog = false;
        this.restUntil = performance.now() + 1000;
        return;
      }
      // Calls asked for and not given; those given count as asked until they start.
      this.asked -= n - items.length;
      // A full answer: more are likely queued, and the next lease need not wait for this one.
      this.backlog = items.length === n;
      if (items.length === 0) this.restUntil = performance.now() + IDLE_POLL_MS;
      for (const [i, item] of items.entries()) {
        if (i > 0) await new Promise((resolve) => setImmediate(resolve));
        this.asked--;
        const call = this.execute(item, leases.get(item.fnId) ?? FIRST_LEASE_MS);
        this.running.add(call);
        void call.finally(() => this.ended(this.running, call));
      }
    })();
    this.leases.add(job);
    void job.finally(() => this.ended(this.leases, job));
  }

  /** Runs a call leased for `leasedMs`; resolves once it is answered, its settling left running (in `settling`). Never rejects. */
  private async execute(item: QueuedCall, leasedMs: number): Promise<void> {
    const { id, attempts, redeliveries, maxAttempts } = item;
    const fail = (err: unknown): void => this.o.log.error({ err, call: id }, 'a detached call could not be settled; it will run again');
    let call: Call;
    try {
      call = this.fns.share(callFromJson(JSON.parse(item.callJson)));
    } catch (err) {
      await this.o.queue.dead(id, `unreadable call: ${err instanceof Error ? err.message : String(err)}`).catch(fail);
      return;
    }
    this.callNeeds = { bytes: Math.max(1, call.fn.memoryMB) * MIB, cpuMillis: call.fn.cpuMillis };
    const maxRedeliveries = this.o.maxRedeliveries ?? DEFAULT_MAX_REDELIVERIES;
    if (redeliveries >= maxRedeliveries) {
      this.settle(this.poisoned(call, item).catch(fail));
      return;
    }
    let ran: { outcome: CallOutcome; log: Promise<string> };
    try {
      ran = await this.runLeased(call, item, leasedMs);
    } catch (err) {
      fail(err);
      return;
    }
    this.settle(this.settled(call, { id, attempts, maxAttempts }, ran.outcome, ran.log).catch(fail));
  }

  private settle(job: Promise<void>): void {
    this.settling.add(job);
    void job.finally(() => this.ended(this.settling, job));
  }

  /** `job` left `set` (running or settling): the loop waiting for room looks again. */
  private ended(set: Set<Promise<void>>, job: Promise<void>): void {
    set.delete(job);
    const tell = this.callEnded;
    this.callEnded = undefined;
    tell?.();
  }

  /**
   * Resolves once a call leaves running or settling, or after IDLE_POLL_MS.
   * One waiter told by the call that ends, rather than a race over every
   * call in flight (which added a reaction to each of them, up to
   * MAX_IN_FLIGHT, at every wait).
   */
  private async callEndedOrSoon(): Promise<void> {
    let timer: NodeJS.Timeout | undefined;
    await new Promise<void>((resolve) => {
      this.callEnded = resolve;
      timer = setTimeout(resolve, IDLE_POLL_MS);
    });
    clearTimeout(timer);
    this.callEnded = undefined;
  }

  /** Remembers the lease the calls of `fnId` need (see fnLeases). */
  private fnLease(fnId: string, leaseMs: number): void {
    this.fnLeases.delete(fnId);
    this.fnLeases.set(fnId, leaseMs);
    if (this.fnLeases.size > LEASE_FNS) this.fnLeases.delete(this.fnLeases.keys().next().value!);
  }

  /** Runs the call (leased for `leasedMs`) with its lease kept alive as its timeout needs; resolves once it is over (its answer drained). */
  private async runLeased(call: Call, item: QueuedCall, leasedMs: number): Promise<{ outcome: CallOutcome; log: Promise<string> }> {
    const leaseMs = call.fn.timeoutS * 1000 + LEASE_HEADROOM_MS;
    this.fnLease(item.fnId, leaseMs);
    // Leased for another time (a fn not run lately, or whose timeout changed): its own lease from now.
    if (leasedMs !== leaseMs) await this.o.queue.extend(item.id, leaseMs);
    const renew = setInterval(() => {
      this.o.queue.extend(item.id, leaseMs).catch((err: unknown) => this.o.log.warn({ err, call: item.id }, 'could not extend a lease'));
    }, leaseMs / 3);
    renew.unref();
    try {
      const running = this.o.invoker.invoke(call, item.body, item.body.length);
      // Nobody reads a detached call's answer: a streamed one is drained so its container goes free.
      const answered = running.response.then(
        (r) => {
          const body = r.body;
          if (Buffer.isBuffer(body)) return undefined;
          return new Promise<void>((resolve) => body.on('close', resolve).resume());
        },
        () => undefined,
      );
      const outcome = await running.outcome;
      await answered;
      return { outcome, log: running.log };
    } finally {
      clearInterval(renew);
    }
  }

  /**
   * A call whose deliveries kept ending with their process dead: recorded
   * as failed (its attempts: every delivery begun) and dead-lettered, not
   * run. POST .../retry runs it again once the cause is fixed.
   */
  private async poisoned(call: Call, item: QueuedCall): Promise<void> {
    const reason =
      `Not run again: the server running this call stopped (crashed or was killed) during ${item.redeliveries} of its deliveries ` +
      `(FNTS_ASYNC_MAX_REDELIVERIES=${this.o.maxRedeliveries ?? DEFAULT_MAX_REDELIVERIES}); retry it once the cause is fixed`;
    this.o.log.error({ call: item.id, fn: item.fnId, redeliveries: item.redeliveries }, 'a detached call killed its server on every delivery: dead-lettered (poison call)');
    await this.o.record({ ...queuedRecord(call, item.attempts + item.redeliveries, reason), status: 'error', completed_at: new Date().toISOString() });
    await this.o.queue.dead(item.id, reason);
    this.o.events?.onDead?.(call);
  }

  /** Tells the queue how the call ended, once its record (and log) is stored. */
  private async settled(call: Call, item: Pick<QueuedCall, 'id' | 'attempts' | 'maxAttempts'>, outcome: CallOutcome, logged: Promise<string>): Promise<void> {
    const log = (await logged) || undefined;
    const attempt = item.attempts + 1;
    if (outcome.code === E.ServiceUnavailable.code) {
      // Cut by a stopping server: the next start runs it again, uncounted.
      await this.o.record(queuedRecord(call, item.attempts, outcome.error), log);
      await this.o.queue.retry(item.id, 0, false);
      return;
    }
    if (outcome.code === E.CallTimeoutServerBusy.code) {
      // Not the function's doing: try again soon, without counting it.
      await this.o.record(queuedRecord(call, item.attempts, outcome.error), log);
      await this.o.queue.retry(item.id, 1000, false);
      return;
    }
    const failedByFunction = outcome.httpStatus >= 500 && (outcome.errorUser || outcome.httpStatus !== 503);
    if (failedByFunction && attempt < item.maxAttempts) {
      await this.o.record(queuedRecord(call, attempt, outcome.error), log);
      await this.o.queue.retry(item.id, retryDelayMs(attempt), true);
      this.o.events?.onRetry?.(call);
      return;
    }
    await this.o.record({ ...callRecord(call, outcome), attempts: attempt }, log);
    if (failedByFunction) {
      await this.o.queue.dead(item.id, outcome.error ?? `status ${outcome.httpStatus}`);
      this.o.events?.onDead?.(call);
    } else await this.o.queue.ack(item.id);
  }

  /** Stops leasing; calls in flight finish (a stopping agent cuts them). Idempotent. */
  async close(): Promise<void> {
    clearInterval(this.reaper);
    this.stop.abort(new ApiError(E.ServiceUnavailable));
    await this.loop;
    await Promise.allSettled([...this.leases]);
    await Promise.allSettled([...this.running]);
    await Promise.allSettled([...this.settling]);
  }
}
