/**
 * What the agent needs to run a fn, computed once per version of the fn and
 * its app (the server caches it), and the per-call request.
 */
import type { App, Fn, FnFormat } from '../models/index.js';
import { slotKey } from './slots.js';

export interface FunctionSpec {
  /** Slot queue key: equal keys mean interchangeable containers. */
  readonly key: string;
  readonly appId: string;
  readonly appName: string;
  readonly fnId: string;
  readonly fnName: string;
  readonly image: string;
  /** How the agent talks to the container. */
  readonly format: FnFormat;
  readonly memoryMB: number;
  readonly cpuMillis: number;
  readonly timeoutMs: number;
  readonly idleTimeoutMs: number;
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
    // A writable /tmp as large as the fn's memory (at least 16 MB).
    tmpfsBytes: Math.max(spec.memoryMB, 16) * 1024 * 1024,
  };
}

export function functionSpec(app: App, fn: Fn): FunctionSpec {
  const env: Record<string, string> = {
    ...app.config,
    ...fn.config,
    FN_FORMAT: fn.format,
    ...(fn.format === 'http-stream' ? { FN_LISTENER: 'unix:/tmp/iofs/lsnr.sock' } : {}),
    FN_APP_ID: app.id,
    FN_APP_NAME: app.name,
    FN_FN_ID: fn.id,
    FN_FN_NAME: fn.name,
    FN_MEMORY: String(fn.memory),
    FN_TYPE: 'sync',
  };
  return {
    key: slotKey({
      app: app.id,
      fn: fn.id,
      image: fn.image,
      memory: fn.memory,
      cpus: 0,
      timeout: fn.timeout,
      idle: fn.idle_timeout,
      format: fn.format,
      env,
    }),
    appId: app.id,
    appName: app.name,
    fnId: fn.id,
    fnName: fn.name,
    image: fn.image,
    format: fn.format,
    memoryMB: fn.memory,
    cpuMillis: 0,
    timeoutMs: fn.timeout * 1000,
    idleTimeoutMs: fn.idle_timeout * 1000,
    env,
  };
}
