/**
 * What the agent needs to run a fn's calls: computed once per version of
 * the fn (its CallFn, shared by the calls) and call type, then kept beside it.
 *
 * Sync and detached calls of one fn share hot containers (as Fn's do): a
 * container is the same whichever type of call it serves, so the slot key
 * and the container's environment do not depend on the call type. What the
 * type changes is where memory for a new container may come from (the
 * resource tracker's areas): a container started for detached calls only
 * is paid from the async area, one started for a sync call from anywhere;
 * an idle container the fn already has costs nothing new, whoever takes it.
 */
import type { CallFn, CallType, FnFormat } from '../models/index.js';
import type { ResourceRequest } from './resource.js';
import { slotKey } from './slots.js';

export interface FunctionSpec {
  /** Slot queue key: equal keys mean interchangeable containers (the same for both call types). */
  readonly key: string;
  /** The call type this view of the spec was asked for: `request` is that type's. */
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
  /** What a container (or cold call) started for a call of `type` reserves: detached calls from the async area only. */
  readonly request: ResourceRequest;
  /** `request` for each call type: a hot pool serves both, and pays a new container as the calls waiting for it may. */
  readonly requests: Readonly<Record<CallType, ResourceRequest>>;
  /**
   * The container's environment: app config, then fn config, then the FDK
   * contract's FN_* (which config cannot override). FN_TYPE is `sync`
   * whatever the call, as Fn sets it: a container serves both types.
   */
  readonly env: Readonly<Record<string, string>>;
  /** CallFn.secretsVersion: which version of the fn's secrets its containers get (undefined: none). */
  readonly secretsVersion?: string;
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

function buildSpec(fn: CallFn): Omit<FunctionSpec, 'type' | 'request'> {
  const env: Record<string, string> = {
    ...fn.config,
    FN_FORMAT: fn.format,
    ...(fn.format === 'http-stream' ? { FN_LISTENER: 'unix:/tmp/iofs/lsnr.sock' } : {}),
    FN_APP_ID: fn.appId,
    FN_APP_NAME: fn.appName,
    FN_FN_ID: fn.fnId,
    FN_FN_NAME: fn.fnName,
    FN_MEMORY: String(fn.memoryMB),
    FN_TYPE: 'sync',
  };
  const request = { memoryMB: fn.memoryMB, cpuMillis: fn.cpuMillis };
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
      // Containers started before the fn's secrets changed are not the ones after (their files differ).
      ...(fn.secretsVersion ? { secrets: fn.secretsVersion } : {}),
    }),
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
    requests: { sync: { ...request, isAsync: false }, detached: { ...request, isAsync: true } },
    env,
    ...(fn.secretsVersion ? { secretsVersion: fn.secretsVersion } : {}),
  };
}

const specs = new WeakMap<CallFn, { sync?: FunctionSpec; detached?: FunctionSpec }>();

/**
 * The spec of `fn`'s calls of `type`. Kept with the CallFn object: the calls
 * of one fn version share it, so this is a lookup, not a hash, per call.
 * Both types' specs share one key and environment.
 */
export function functionSpec(fn: CallFn, type: CallType = 'sync'): FunctionSpec {
  let byType = specs.get(fn);
  if (!byType) specs.set(fn, (byType = {}));
  let spec = byType[type];
  if (!spec) {
    const other = byType[type === 'sync' ? 'detached' : 'sync'];
    const shared = other ?? buildSpec(fn);
    spec = byType[type] = { ...shared, type, request: shared.requests[type] };
  }
  return spec;
}
