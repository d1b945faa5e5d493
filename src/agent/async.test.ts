import { pino } from 'pino';
import { afterEach, describe, expect, it, vi } from 'vitest';
import type { Invoker } from '../call/index.js';
import { openSqlite, type SqlDatastore } from '../datastore/index.js';
import type { CallFn } from '../models/index.js';
import { queueCalls, timedInvoker } from '../../test/support/calls.js';
import { SqliteQueue, type Queue, type QueuedCall } from '../mq/index.js';
import { AsyncWorkers } from './async.js';

/** Workers on `queue` through `invoker`, always with room, records dropped (or given to `record`): started. */
function startWorkers(queue: Queue, invoker: Invoker, record: () => Promise<void> = async () => undefined, asyncAreaBytes?: number): AsyncWorkers {
  const area = { syncTotal: 0, syncUsed: 0, asyncTotal: asyncAreaBytes ?? 0, asyncUsed: 0, asyncHighWater: asyncAreaBytes ?? 0 };
  const workers = new AsyncWorkers({
    invoker,
    queue,
    resources: { waitAsyncCapacity: async () => undefined, ...(asyncAreaBytes === undefined ? {} : { snapshot: () => ({ memory: area, cpu: { ...area, asyncTotal: 8000 }, waiters: 0 }) }) },
    log: pino({ level: 'silent' }),
    record,
    instance: 'me',
    isInstanceAlive: () => true,
  });
  workers.start();
  return workers;
}

describe('the async workers', () => {
  let ds: SqlDatastore | undefined;
  let workers: AsyncWorkers | undefined;
  afterEach(async () => {
    await workers?.close();
    await ds?.close();
  });

  /** A queue (on a fresh in-memory datastore) holding `n` detached calls. */
  async function queued(n: number): Promise<SqliteQueue> {
    ds = await openSqlite(':memory:');
    return queueCalls(new SqliteQueue(ds.thread!), n);
  }

  /**
   * 200 detached calls of `callMs` through workers beside `sync` sync calls,
   * watched for a second, or until `enough` holds: a test whose assertions
   * only more time could make true (a peak reached, all calls run) stops
   * there; one that bounds a peak watches the whole second.
   */
  async function run(
    sync: number,
    record?: () => Promise<void>,
    callMs = 50,
    asyncAreaBytes?: number,
    enough: (invoker: { peak: number; ran: number }) => boolean = () => false,
  ): Promise<{ peak: number; ran: number }> {
    const queue = await queued(200);
    const invoker = timedInvoker(callMs, () => sync);
    workers = startWorkers(queue, invoker, record, asyncAreaBytes);
    const end = performance.now() + 1000;
    while (performance.now() < end && !enough(invoker)) await new Promise((r) => setTimeout(r, Math.min(10, end - performance.now())));
    return invoker;
  }

  it('run many detached calls at once when no sync call runs, and one or two while sync calls keep the node busy', async () => {
    const idle = await run(0, undefined, 50, undefined, (r) => r.ran === 200);
    await workers!.close();
    await ds!.close();
    workers = undefined;
    const busy = await run(16);
    // Alone: up to 64 at once, the 200 calls of 50 ms done within the second.
    expect(idle.peak).toBeGreaterThanOrEqual(32);
    expect(idle.ran).toBe(200);
    // Beside 16 sync calls: the backlog still moves, on what they leave.
    expect(busy.peak).toBeLessThanOrEqual(3);
    expect(busy.ran).toBeGreaterThan(10);
  });

  it('give the calls of one fn one CallFn (the agent keeps its spec and slot key with it, not rebuilt per call)', async () => {
    const seen = new Set<CallFn>();
    const queue = await queued(20);
    const invoker = timedInvoker(1, () => 0);
    const invoke = invoker.invoke.bind(invoker);
    invoker.invoke = (c, ...rest) => {
      seen.add(c.fn);
      return invoke(c, ...rest);
    };
    workers = startWorkers(queue, invoker);
    while (invoker.ran < 20) await new Promise((r) => setTimeout(r, 5));
    expect(seen.size).toBe(1);
  });

  it("keep as many calls in flight as the async area holds containers of their fn's memory: a few on a small node, more than 64 on a big one", async () => {
    const MiB = 1024 * 1024;
    // Room for four containers of the calls' fn (128 MB): four at a time, and the calls still all run.
    const small = await run(0, undefined, 20, 512 * MiB);
    expect(small.peak).toBe(4);
    expect(small.ran).toBeGreaterThan(100);
    await workers!.close();
    await ds!.close();
    workers = undefined;
    // Room for hundreds: wider than a fixed 64.
    const big = await run(0, undefined, 50, 64 * 1024 * MiB, (r) => r.ran === 200);
    expect(big.peak).toBeGreaterThan(64);
    expect(big.ran).toBe(200);
  });

  it('beside sync calls, a detached call counts until it is settled (its record and the queue take CPU), not only until it is answered', async () => {
    let settling = 0;
    let peak = 0;
    const slowRecord = async (): Promise<void> => {
      peak = Math.max(peak, ++settling);
      await new Promise((r) => setTimeout(r, 100));
      settling--;
    };
    // Alone: quick calls, slow records: records pile up (settling holds no container).
    await run(0, slowRecord, 5, undefined, () => peak > 8);
    expect(peak).toBeGreaterThan(8);
    await workers!.close();
    await ds!.close();
    workers = undefined;
    peak = 0;
    // Beside 16 sync calls: one or two calls running or being settled at a time, and the backlog still moves.
    const busy = await run(16, slowRecord, 5);
    expect(peak).toBeLessThanOrEqual(3);
    expect(busy.ran).toBeGreaterThan(3);
  });

  it('hold back while detached calls are being accepted, as beside sync calls, and drain at full width once the burst passes', async () => {
    // Enough that many are still queued once the width has grown back past 16 (it follows the callers'
    // load down over ~half a second each time it halves): with 200, a run slowed by others ran short of calls.
    const queue = await queued(400);
    const invoker = timedInvoker(50, () => 0);
    workers = startWorkers(queue, invoker);
    // 16 callers waiting for their calls to be stored (a burst of detached requests at 16 connections).
    let stored!: () => void;
    const storing = new Promise<string>((resolve) => (stored = () => resolve('id')));
    const accepts = Array.from({ length: 16 }, () => workers!.accepting(storing));
    await new Promise((r) => setTimeout(r, 1000));
    expect(invoker.peak).toBeLessThanOrEqual(3);
    expect(invoker.ran).toBeGreaterThan(10);
    stored();
    expect(await Promise.all(accepts)).toEqual(Array(16).fill('id'));
    invoker.peak = 0;
    const until = Date.now() + 5000;
    while (invoker.ran < 400 && Date.now() < until) await new Promise((r) => setTimeout(r, 50));
    expect(invoker.ran).toBe(400);
    expect(invoker.peak).toBeGreaterThanOrEqual(16);
  });

  it("start a lease's calls a turn of the event loop apart: what came in meanwhile (a container's answer) is not held behind them all", async () => {
    // One call of the fn run first: its calls are then leased for its own time, and start without an extend first.
    const queue = await queued(1);
    const timed = timedInvoker(10);
    const order: string[] = [];
    const invoker: Invoker = {
      ...timed,
      invoke(c, ...rest) {
        // The first call's start: I/O arriving now (queued as a setImmediate is) comes before the next start.
        if (order.length === 0) setImmediate(() => order.push('answer'));
        order.push('start');
        return timed.invoke(c, ...rest);
      },
    };
    workers = startWorkers(queue, invoker);
    const starts = async (n: number): Promise<void> => {
      const until = Date.now() + 5000;
      while (order.filter((o) => o === 'start').length < n && Date.now() < until) await new Promise((r) => setTimeout(r, 5));
    };
    await starts(1);
    order.length = 0;
    await queueCalls(queue, 16, 1);
    workers.notify();
    await starts(16);
    expect(order.slice(0, 3)).toEqual(['start', 'answer', 'start']);
    expect(order.filter((o) => o === 'start')).toHaveLength(16);
  });

  it('stop as soon as they are closed while leasing, with no timer to wait for (the process ended in the middle of its shutdown)', async () => {
    // Timers frozen: an idle poll's (unref'd) timer was all that would have ended the wait, and with
    // nothing else keeping the process alive it ended there, its last records and queue unwritten.
    vi.useFakeTimers();
    try {
      let answer!: (items: QueuedCall[]) => void;
      await new Promise<void>((leasing) => {
        const queue = {
          releaseDead: async () => 0,
          reserveBatch: () => {
            leasing();
            return new Promise<QueuedCall[]>((r) => (answer = r));
          },
        } as unknown as Queue;
        workers = startWorkers(
          queue,
          timedInvoker(1, () => 0),
        );
      });
      let closed = false;
      const closing = workers!.close().then(() => (closed = true));
      answer([]);
      for (let i = 0; i < 100 && !closed; i++) await Promise.resolve();
      expect(closed).toBe(true);
      await closing;
    } finally {
      vi.useRealTimers();
      // Not closed (the defect back): nothing for afterEach to wait on for ever.
      workers = undefined;
    }
  });

  it('lease a backlog up to three leases at once while the leases are slower than the calls, and an empty queue one lease at a time, resting between', async () => {
    const queue = await queued(200);
    // A queue whose every lease takes 30 ms (a few round trips to a loaded database).
    let underWay = 0;
    let peak = 0;
    let leases = 0;
    const slow = Object.assign(Object.create(queue) as SqliteQueue, {
      reserveBatch: async (...args: Parameters<SqliteQueue['reserveBatch']>) => {
        peak = Math.max(peak, ++underWay);
        leases++;
        try {
          await new Promise((r) => setTimeout(r, 30));
          return await queue.reserveBatch(...args);
        } finally {
          underWay--;
        }
      },
    });
    const invoker = timedInvoker(50, () => 0);
    workers = startWorkers(slow, invoker);
    const deadline = Date.now() + 10_000;
    while (invoker.ran < 200 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 10));
    expect(invoker.ran).toBe(200);
    // One lease at a time kept at most 16 calls coming every 30 ms: the calls waited for their leases.
    expect(peak).toBe(3);
    // Drained: one lease looks at a time, IDLE_POLL_MS apart.
    peak = 0;
    leases = 0;
    await new Promise((r) => setTimeout(r, 1000));
    expect(peak).toBe(1);
    expect(leases).toBeLessThanOrEqual(6);
  });

  it("leases the calls of a fn it has run for the fn's timeout from the start: an extend only for the first ones", async () => {
    ds = await openSqlite(':memory:');
    const queue = new SqliteQueue(ds.thread!);
    await queueCalls(queue, 10);
    let extends_ = 0;
    const counted = Object.assign(Object.create(queue) as SqliteQueue, {
      extend: (id: string, ms: number) => {
        extends_++;
        return queue.extend(id, ms);
      },
    });
    // Calls that last long enough to look at their leases while they run.
    const invoker = timedInvoker(400, () => 0);
    workers = startWorkers(counted, invoker);
    const leases = async (): Promise<number[]> => {
      const rows = await ds!.database().selectFrom('mq').select('lease_until').where('state', '=', 'leased').execute();
      return rows.map((r) => Number(r.lease_until) - Date.now());
    };
    const until = async (done: () => Promise<boolean>): Promise<void> => {
      const deadline = Date.now() + 5000;
      while (!(await done())) {
        if (Date.now() > deadline) throw new Error('timed out');
        await new Promise((r) => setTimeout(r, 10));
      }
    };
    await until(async () => (await leases()).length === 10);
    // The first calls of F: leased for long, cut to their timeout (30 s) and 30 s by an extend each.
    expect(extends_).toBe(10);
    for (const ms of await leases()) expect(ms).toBeLessThanOrEqual(60_000);
    await until(async () => invoker.ran === 10);
    await queueCalls(queue, 20, 10);
    workers.notify();
    await until(async () => (await leases()).length === 20);
    // F's next calls: leased for F's time at once, with no extend.
    expect(extends_).toBe(10);
    for (const ms of await leases()) {
      expect(ms).toBeLessThanOrEqual(60_000);
      expect(ms).toBeGreaterThan(55_000);
    }
    await until(async () => invoker.ran === 30);
  });
});
