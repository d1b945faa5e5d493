/**
 * What the agent needs to run a fn's calls of one type: computed once per
 * version of the fn (its CallFn, shared by the calls) and call type, then
 * kept beside it.
 */
import type { CallFn, CallType, FnFormat } from '../models/index.js';
import type { ResourceRequest } from './resource.js';
import { slotKey } from './slots.js';

export interface FunctionSpec {
  /** Slot queue key: equal keys mean interchangeable containers. */
  readonly key: string;
  readonly type: CallType;
  readonly appId: string;
  readonly appName: string;
  readonly fnId: string;
  readonly fnName: string;
  readonly image: string;
  /** How the agent talks to the container. */
  readonly format: FnFormat;
  readonly memoryMB: number;
  readonly cpuMillis: number;
  readonly tmpfsMB: number;
  readonly timeoutMs: number;
  readonly idleTimeoutMs: number;
  /** What each container (or cold call) reserves: detached calls from the async area only. */
  readonly request: ResourceRequest;
  /**
   * The container's environment: app config, then fn config, then the FDK
   * contract's FN_* (which config cannot override).
   */
  readonly env: Readonly<Record<string, string>>;
}

/** What every container of the fn gets from the engine, whatever its format. */
export function containerBase(spec: FunctionSpec): { image: string; memoryBytes: number; cpuMillis: number; tmpfsBytes: number } {
  return {
    image: spec.image,
    memoryBytes: spec.memoryMB * 1024 * 1024,
    cpuMillis: spec.cpuMillis,
    // A writable /tmp as large as asked, else as the fn's memory (at least 16 MB).
    tmpfsBytes: (spec.tmpfsMB > 0 ? spec.tmpfsMB : Math.max(spec.memoryMB, 16)) * 1024 * 1024,
  };
}

function buildSpec(fn: CallFn, type: CallType): FunctionSpec {
  const env: Record<string, string> = {
    ...fn.config,
    FN_FORMAT: fn.format,
    ...(fn.format === 'http-stream' ? { FN_LISTENER: 'unix:/tmp/iofs/lsnr.sock' } : {}),
    FN_APP_ID: fn.appId,
    FN_APP_NAME: fn.appName,
    FN_FN_ID: fn.fnId,
    FN_FN_NAME: fn.fnName,
    FN_MEMORY: String(fn.memoryMB),
    FN_TYPE: type,
  };
  return {
    key: slotKey({
      app: fn.appId,
      fn: fn.fnId,
      image: fn.image,
      memory: fn.memoryMB,
      cpus: fn.cpuMillis,
      tmpfs: fn.tmpfsMB,
      timeout: fn.timeoutS,
      idle: fn.idleTimeoutS,
      format: fn.format,
      env,
    }),
    type,
    appId: fn.appId,
    appName: fn.appName,
    fnId: fn.fnId,
    fnName: fn.fnName,
    image: fn.image,
    format: fn.format,
    memoryMB: fn.memoryMB,
    cpuMillis: fn.cpuMillis,
    tmpfsMB: fn.tmpfsMB,
    timeoutMs: fn.timeoutS * 1000,
    idleTimeoutMs: fn.idleTimeoutS * 1000,
    request: { memoryMB: fn.memoryMB, cpuMillis: fn.cpuMillis, isAsync: type === 'detached' },
    env,
  };
}

const specs = new WeakMap<CallFn, { sync?: FunctionSpec; detached?: FunctionSpec }>();

/**
 * The spec of `fn`'s calls of `type`. Kept with the CallFn object: the calls
 * of one fn version share it, so this is a lookup, not a hash, per call.
 */
export function functionSpec(fn: CallFn, type: CallType = 'sync'): FunctionSpec {
  let byType = specs.get(fn);
  if (!byType) specs.set(fn, (byType = {}));
  return (byType[type] ??= buildSpec(fn, type));
}
