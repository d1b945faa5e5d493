/** A fn, calls of it, a queue of them and an invoker running them, for unit tests of what runs or stores detached calls (workers, records). */
import type { Invoker, RunningCall } from '../../src/call/index.js';
import { callToJson, type Call, type CallFn } from '../../src/models/index.js';
import type { Queue } from '../../src/mq/index.js';
import { successOutcome } from './outcomes.js';

/** Fn's defaults: 128 MB, 30 s timeout and idle timeout, http-stream. */
export const TEST_FN = {
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
  runnerGroup: 'default',
} as unknown as CallFn;

/** A detached call `id` of TEST_FN (or `fn`), made now. */
export function detachedCall(id: string, fn: CallFn = TEST_FN): Call {
  return { id, type: 'detached', fn, triggerId: undefined, method: 'POST', url: 'http://h/invoke/F', headers: [], createdAt: Date.now() };
}

/** Puts `n` detached calls of TEST_FN in `queue` (ids c<first>, c<first + 1>, ...), one at a time; resolves with it. */
export async function queueCalls<Q extends Queue>(queue: Q, n: number, first = 0): Promise<Q> {
  for (let i = first; i < first + n; i++) {
    const c = detachedCall(`c${i}`);
    await queue.enqueue({ id: c.id, fnId: c.fn.fnId, callJson: JSON.stringify(callToJson(c)), body: Buffer.from('{}'), maxAttempts: 3 });
  }
  return queue;
}

/**
 * An invoker whose calls each succeed after `ms`, logging `log(call)`,
 * counting how many run at once (peak) and how many ran; `sync()` sync
 * calls are said to be in flight.
 */
export function timedInvoker(ms: number, sync: () => number = () => 0, log: (c: Call) => string = () => ''): Invoker & { peak: number; ran: number } {
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
      return { response: done.then(() => ({ status: 200, headers: [], body: Buffer.alloc(0) })), outcome, log: done.then(() => log(c)), cancel() {} } as unknown as RunningCall;
    },
  };
  return inv;
}
