import { pino } from 'pino';
import { afterEach, describe, expect, it } from 'vitest';
import type { Invoker, RunningCall } from '../call/index.js';
import { openSqlite, type SqlDatastore } from '../datastore/index.js';
import { callToJson, type Call, type CallFn } from '../models/index.js';
import { successOutcome } from '../../test/support/outcomes.js';
import { SqliteQueue } from '../mq/index.js';
import { AsyncWorkers } from './async.js';

const fn = {
  appId: 'A',
  appName: 'app',
  fnId: 'F',
  fnName: 'f',
  image: 'i',
  memoryMB: 128,
  cpuMillis: 0,
  tmpfsMB: 0,
  timeoutS: 30,
  idleTimeoutS: 30,
  format: 'http-stream',
  config: {},
  annotations: {},
} as unknown as CallFn;
const call = (id: string): Call => ({ id, type: 'detached', fn, triggerId: undefined, method: 'POST', url: 'http://h/invoke/F', headers: [], createdAt: Date.now() });

/** An invoker whose calls each last `ms`, counting how many run at once; `sync` sync calls are said to be in flight. */
function slowInvoker(ms: number, sync: () => number): Invoker & { peak: number; ran: number } {
  let now = 0;
  const inv = {
    abort() {},
    async close() {},
    peak: 0,
    ran: 0,
    syncInFlight: sync,
    invoke(c: Call): RunningCall {
      inv.peak = Math.max(inv.peak, ++now);
      const done = new Promise<void>((r) => setTimeout(r, ms)).then(() => {
        now--;
        inv.ran++;
      });
      const outcome = done.then(() => successOutcome(c.id, ms));
      return { response: done.then(() => ({ status: 200, headers: [], body: Buffer.alloc(0) })), outcome, log: done.then(() => ''), cancel() {} } as unknown as RunningCall;
    },
  };
  return inv;
}

describe('the async workers', () => {
  let ds: SqlDatastore | undefined;
  let workers: AsyncWorkers | undefined;
  afterEach(async () => {
    await workers?.close();
    await ds?.close();
  });

  async function run(sync: number): Promise<{ peak: number; ran: number }> {
    ds = await openSqlite(':memory:');
    const queue = new SqliteQueue(ds.thread!);
    for (let i = 0; i < 200; i++) {
      const c = call(`c${i}`);
      await queue.enqueue({ id: c.id, fnId: 'F', callJson: JSON.stringify(callToJson(c)), body: Buffer.from('{}'), maxAttempts: 3 });
    }
    const invoker = slowInvoker(50, () => sync);
    workers = new AsyncWorkers({
      invoker,
      queue,
      resources: { waitAsyncCapacity: async () => undefined },
      log: pino({ level: 'silent' }),
      record: async () => undefined,
      instance: 'me',
      isInstanceAlive: () => true,
    });
    workers.start();
    await new Promise((r) => setTimeout(r, 1000));
    return invoker;
  }

  it('run many detached calls at once when no sync call runs, and one or two while sync calls keep the node busy', async () => {
    const idle = await run(0);
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
});
