/** A fn and calls of it for unit tests of what runs or stores detached calls (workers, records). */
import type { Call, CallFn } from '../../src/models/index.js';

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
