/**
 * Call: one function call, as it travels (a `Call`: everything needed to run
 * it anywhere, serializable as Fn's models.Call JSON, which the runner
 * protocol carries in TryCall.models_call_json) and as it ends (a
 * `CallOutcome`, from which call records, CallFinished, metrics and traces
 * are built). The request body is not part of the Call: it travels beside it
 * as a stream.
 */
import { invokeAuthAsked, type Annotations } from './annotations.js';
import { DEFAULT_RUNNER_GROUP, runnerGroupOf, type App } from './app.js';
import { validateConfig, type ConfigMap } from './common.js';
import { ApiError, E, MAX_CONFIG_BYTES, MAX_IDLE_TIMEOUT_S, MAX_MEMORY_MB, MAX_TIMEOUT_S } from './errors.js';
import { imageRefProblem } from './image.js';
import { FN_FORMATS, type Fn, type FnFormat } from './fn.js';

/**
 * Headers as alternating names and values, names as sent (the layout of
 * Node's rawHeaders): no object to build per call, repeats kept in order.
 */
export type RawHeaders = string[];

/** `sync`: the caller waits for the answer. `detached`: queued, run later; takes no sync-only resources. */
export type CallType = 'sync' | 'detached';
export const CALL_TYPES: readonly CallType[] = ['sync', 'detached'];

/**
 * The fn's runtime fields, as of the moment the call was made: built once
 * per version of the fn and its app and shared (frozen) by all its calls,
 * so the agent can keep per-fn work (its slot key, its environment) with it.
 */
export interface CallFn {
  readonly appId: string;
  readonly appName: string;
  readonly fnId: string;
  readonly fnName: string;
  readonly image: string;
  readonly format: FnFormat;
  readonly memoryMB: number;
  /** 0 = no CPU limit. */
  readonly cpuMillis: number;
  readonly timeoutS: number;
  readonly idleTimeoutS: number;
  /** The writable /tmp's size; 0 = as large as the fn's memory (at least 16 MB). */
  readonly tmpfsMB: number;
  /** The app's config, then the fn's on top. */
  readonly config: ConfigMap;
  readonly annotations: Annotations;
  readonly syslogUrl: string | undefined;
  /** The app's runner group (fnts.io/runner-group, else `default`): where a managed fleet places the call. */
  readonly runnerGroup: string;
  /**
   * A digest of the versions of the app's and fn's secrets (names and
   * write versions, never values), '' or absent when it has none: part of
   * the slot key, so that containers made before a secret changed are not
   * given calls made after. The values themselves never travel with a
   * call: a container reads them when it starts (agent/secrets.ts).
   */
  readonly secretsVersion?: string;
  /** The app or fn asks for a token on invoke (fnts.io/invoke-auth); known where the call comes in, not sent to runners. */
  readonly invokeAuth?: boolean;
}

export interface Call {
  readonly id: string;
  readonly type: CallType;
  readonly fn: CallFn;
  /** Set when the call came through an HTTP trigger: the function then sees the caller's HTTP details. */
  readonly triggerId: string | undefined;
  /** The caller's method. */
  readonly method: string;
  /** The full URL the caller used. */
  readonly url: string;
  /** The caller's headers, hop-by-hop ones and Content-Length removed. */
  readonly headers: RawHeaders;
  /** Milliseconds since the epoch. */
  readonly createdAt: number;
}

/** The runtime fields of `fn` of `app`, for its calls (frozen: share it); `secretsVersion` as CallFn says. */
export function callFn(app: App, fn: Fn, secretsVersion = ''): CallFn {
  return Object.freeze({
    appId: app.id,
    appName: app.name,
    fnId: fn.id,
    fnName: fn.name,
    image: fn.image,
    format: fn.format,
    memoryMB: fn.memory,
    cpuMillis: 0,
    timeoutS: fn.timeout,
    idleTimeoutS: fn.idle_timeout,
    tmpfsMB: 0,
    config: Object.freeze({ ...app.config, ...fn.config }),
    annotations: fn.annotations,
    syslogUrl: app.syslog_url,
    runnerGroup: runnerGroupOf(app.annotations),
    ...(secretsVersion !== '' ? { secretsVersion } : {}),
    ...(invokeAuthAsked(app.annotations) || invokeAuthAsked(fn.annotations) ? { invokeAuth: true } : {}),
  });
}

/** Fn's models.Call JSON, as a runner gets it (TryCall.models_call_json) and a call record shows it. */
export interface FnCallJson {
  id: string;
  status?: string;
  image?: string;
  type?: string;
  url?: string;
  method?: string;
  /** seconds */
  timeout?: number;
  /** seconds */
  idle_timeout?: number;
  /** MB */
  tmpfs_size?: number;
  /** MB */
  memory?: number;
  /** Milli-CPUs, as Fn writes them ("500m"). */
  cpus?: string;
  config?: Record<string, string>;
  annotations?: Record<string, unknown>;
  headers?: Record<string, string[]>;
  syslog_url?: string;
  created_at?: string;
  app_id?: string;
  app_name?: string;
  fn_id?: string;
  trigger_id?: string;
  /** fnts's own: the fn's name and format, which Fn's runners read from config (FN_FN_NAME, FN_FORMAT). */
  fn_name?: string;
  format?: string;
  /** fnts's own: the app's runner group, when not the default (a detached call keeps it through the queue). */
  runner_group?: string;
  /** fnts's own: CallFn.secretsVersion, when the fn has secrets (a digest, never a value). */
  secrets_version?: string;
}

/** A call as Fn's models.Call JSON. Header names keep their first spelling; values keep their order. */
export function callToJson(call: Call): FnCallJson {
  const { fn } = call;
  const headers: Record<string, string[]> = {};
  for (let i = 0; i + 1 < call.headers.length; i += 2) (headers[call.headers[i]!] ??= []).push(call.headers[i + 1]!);
  return {
    id: call.id,
    image: fn.image,
    type: call.type,
    url: call.url,
    method: call.method,
    timeout: fn.timeoutS,
    idle_timeout: fn.idleTimeoutS,
    ...(fn.tmpfsMB > 0 ? { tmpfs_size: fn.tmpfsMB } : {}),
    memory: fn.memoryMB,
    ...(fn.cpuMillis > 0 ? { cpus: `${fn.cpuMillis}m` } : {}),
    config: { ...fn.config },
    annotations: { ...fn.annotations },
    headers,
    ...(fn.syslogUrl ? { syslog_url: fn.syslogUrl } : {}),
    created_at: new Date(call.createdAt).toISOString(),
    app_id: fn.appId,
    app_name: fn.appName,
    fn_id: fn.fnId,
    ...(call.triggerId ? { trigger_id: call.triggerId } : {}),
    fn_name: fn.fnName,
    format: fn.format,
    ...(fn.runnerGroup !== DEFAULT_RUNNER_GROUP ? { runner_group: fn.runnerGroup } : {}),
    ...(fn.secretsVersion ? { secrets_version: fn.secretsVersion } : {}),
  };
}

function bad(what: string): ApiError {
  return new ApiError(E.InvalidJSON, { message: `Invalid call: ${what}` });
}

function str(v: unknown, what: string, required = false): string | undefined {
  if (v === undefined || v === null) {
    if (required) throw bad(`${what} is required`);
    return undefined;
  }
  if (typeof v !== 'string') throw bad(`${what} must be a string`);
  return v;
}

function num(v: unknown, what: string, min: number, max: number, fallback: number): number {
  if (v === undefined || v === null) return fallback;
  if (typeof v !== 'number' || !Number.isInteger(v) || v < min || v > max) throw bad(`${what} must be an integer from ${min} to ${max}`);
  return v;
}

/** The fn's image, checked by Docker's reference grammar before anything asks the engine for it. */
function image(v: unknown): string {
  const ref = str(v, 'image', true)!;
  const problem = imageRefProblem(ref);
  if (problem !== undefined) throw bad(`image ${problem}`);
  return ref;
}

/**
 * The app's and fn's config together, under the limits the API keeps each
 * of them to; LBs add a few FN_* entries of their own (Fn's runners read
 * the fn's name, format, memory and type from there).
 */
function callConfig(v: unknown): Record<string, string> {
  const config = stringMap(v, 'config');
  try {
    validateConfig(config, 2 * MAX_CONFIG_BYTES + 4096);
  } catch (err) {
    throw bad(`config: ${err instanceof Error ? err.message : String(err)}`);
  }
  return config;
}

/** Fn's MilliCPUs: "500m", or cores as a number or string ("0.5"). */
function milliCpus(v: unknown): number {
  if (v === undefined || v === null || v === '') return 0;
  const text = String(v);
  const m = /^(\d+)m$/.exec(text);
  const millis = m ? Number(m[1]) : Math.round(Number(text) * 1000);
  if (!Number.isFinite(millis) || millis < 0) throw bad(`cpus ${JSON.stringify(v)} is not milli-CPUs ("500m") or cores ("0.5")`);
  return millis;
}

/** secrets_version: a digest (hex), or nothing. */
function secretsVersionOf(v: unknown): { secretsVersion?: string } {
  const version = str(v, 'secrets_version');
  if (!version) return {};
  if (!/^[0-9a-f]{1,64}$/.test(version)) throw bad('secrets_version must be a hex digest');
  return { secretsVersion: version };
}

function stringMap(v: unknown, what: string): Record<string, string> {
  if (v === undefined || v === null) return {};
  if (typeof v !== 'object' || Array.isArray(v)) throw bad(`${what} must be an object`);
  const out: Record<string, string> = {};
  for (const [k, x] of Object.entries(v)) {
    if (typeof x !== 'string') throw bad(`${what}.${k} must be a string`);
    out[k] = x;
  }
  return out;
}

/**
 * Reads Fn's models.Call JSON (from an LB, a queue) into a Call. Fields Fn
 * keeps in config (FN_FN_NAME, FN_FORMAT, FN_APP_NAME) are read from there
 * when the JSON lacks fnts's own fields. Whoever sent it, the call is held
 * to the limits the API holds fns to (image reference, memory, timeouts,
 * config size): a runner is as safe from a hand-made TryCall as the API is
 * from a hand-made fn. Throws 400 InvalidJson naming the bad field.
 */
export function callFromJson(json: unknown): Call {
  if (typeof json !== 'object' || json === null || Array.isArray(json)) throw bad('not a JSON object');
  const j = json as Record<string, unknown>;
  const config = callConfig(j.config);
  const type = str(j.type, 'type') ?? 'sync';
  // Fn's older name for detached.
  const callType: CallType = type === 'async' ? 'detached' : (type as CallType);
  if (!CALL_TYPES.includes(callType)) throw bad(`type ${type} is not one of ${CALL_TYPES.join(', ')}`);
  const format = str(j.format, 'format') ?? config.FN_FORMAT ?? 'http-stream';
  if (!(FN_FORMATS as readonly string[]).includes(format)) throw bad(`format ${format} is not one of ${FN_FORMATS.join(', ')}`);
  const rawHeaders: RawHeaders = [];
  if (j.headers !== undefined && j.headers !== null) {
    if (typeof j.headers !== 'object' || Array.isArray(j.headers)) throw bad('headers must be an object');
    for (const [name, values] of Object.entries(j.headers)) {
      if (!Array.isArray(values) || values.some((x) => typeof x !== 'string')) throw bad(`headers.${name} must be a list of strings`);
      for (const value of values as string[]) rawHeaders.push(name, value);
    }
  }
  const annotations = j.annotations;
  if (annotations !== undefined && annotations !== null && (typeof annotations !== 'object' || Array.isArray(annotations))) throw bad('annotations must be an object');
  const created = str(j.created_at, 'created_at');
  const createdAt = created === undefined ? Date.now() : Date.parse(created);
  if (!Number.isFinite(createdAt)) throw bad(`created_at ${created} is not a date-time`);
  const fnId = str(j.fn_id, 'fn_id', true)!;
  return {
    id: str(j.id, 'id', true)!,
    type: callType,
    fn: Object.freeze({
      appId: str(j.app_id, 'app_id', true)!,
      appName: str(j.app_name, 'app_name') ?? config.FN_APP_NAME ?? '',
      fnId,
      fnName: str(j.fn_name, 'fn_name') ?? config.FN_FN_NAME ?? fnId,
      image: image(j.image),
      format: format as FnFormat,
      memoryMB: num(j.memory, 'memory', 1, MAX_MEMORY_MB, 128),
      cpuMillis: milliCpus(j.cpus),
      timeoutS: num(j.timeout, 'timeout', 1, MAX_TIMEOUT_S, 30),
      idleTimeoutS: num(j.idle_timeout, 'idle_timeout', 1, MAX_IDLE_TIMEOUT_S, 30),
      tmpfsMB: num(j.tmpfs_size, 'tmpfs_size', 0, MAX_MEMORY_MB, 0),
      config: Object.freeze(config),
      annotations: (annotations ?? {}) as Annotations,
      syslogUrl: str(j.syslog_url, 'syslog_url') || undefined,
      runnerGroup: str(j.runner_group, 'runner_group') || DEFAULT_RUNNER_GROUP,
      ...secretsVersionOf(j.secrets_version),
    }),
    triggerId: str(j.trigger_id, 'trigger_id') || undefined,
    method: str(j.method, 'method') ?? 'POST',
    url: str(j.url, 'url') ?? '',
    headers: rawHeaders,
    createdAt,
  };
}

/**
 * One CallFn per distinct fn as its calls describe it (calls read from
 * JSON: a runner's models_call_json, a detached call's queued item): the
 * agent keeps per-fn work with the CallFn object (the function's spec, its
 * slot key, a hash), so each such call would otherwise pay for that work
 * again. Keyed by every field; at most `max` kept, the oldest dropped first.
 */
export class FnInterner {
  private readonly fns = new Map<string, CallFn>();

  constructor(private readonly max = 1000) {}

  share(call: Call): Call {
    const key = JSON.stringify(call.fn);
    const known = this.fns.get(key);
    if (known) return { ...call, fn: known };
    if (this.fns.size >= this.max) this.fns.delete(this.fns.keys().next().value!);
    this.fns.set(key, call.fn);
    return call;
  }
}

// ---- how a call ended

/** Fn's call statuses: `queued` and `running` for a detached call not yet done. */
export type CallStatus = 'queued' | 'running' | 'success' | 'error' | 'timeout' | 'cancelled';

/** One sample of the container's use while the call ran (Fn's Stat). */
export interface CallStat {
  /** RFC 3339 */
  readonly timestamp: string;
  /** net_rx, net_tx, mem_limit, mem_usage, disk_read, disk_write, cpu_user, cpu_total, cpu_kernel */
  readonly metrics: Readonly<Record<string, number>>;
}

/** Where a call's time went, in milliseconds. */
export interface CallTimings {
  /** Arrival until a container was ready for the call (queueing, and starting one if needed). */
  readonly wait_ms: number;
  /** The function's own time: request sent until answer received. */
  readonly exec_ms: number;
  /** For a call that started its container: making the image available (inspect or pull). */
  readonly image_ms?: number;
  /** ... creating the container. */
  readonly create_ms?: number;
  /** ... from start until the function was ready for calls. */
  readonly start_ms?: number;
  /**
   * The call ran on a container started ahead of demand by the keep-alive
   * policy (FNTS_KEEPALIVE_POLICY=histogram): it waited for no start, so it
   * has no image/create/start times (it was not cold).
   */
  readonly prewarmed?: true;
}

/**
 * How one call ended, whichever node ran it. Call records, the runner
 * protocol's CallFinished, metrics and traces are built from it.
 */
export interface CallOutcome {
  readonly id: string;
  readonly status: CallStatus;
  /** The HTTP status the caller got (or would have got). */
  readonly httpStatus: number;
  /** Why the call failed, when it did: words for people (records, logs), never for decisions. */
  readonly error?: string;
  /**
   * The error catalog's code for `error` (models/errors.ts: 'CallTimeoutServerBusy',
   * 'ServiceUnavailable', 'CallTimeout', ...), when the call failed: what code decides on.
   */
  readonly code?: string;
  /** The failure was the function's doing (crash, timeout, bad answer), not the platform's. */
  readonly errorUser: boolean;
  /**
   * A container began working on the call (the function may have seen it):
   * false for a call refused or cut before that, which may run elsewhere
   * or again without running twice.
   */
  readonly ran: boolean;
  readonly createdAt: string;
  readonly startedAt?: string;
  readonly completedAt: string;
  readonly timings: CallTimings;
  readonly stats: readonly CallStat[];
}

export interface CallRecord {
  readonly id: string;
  readonly status: CallStatus;
  /** Why the call failed, when it did. */
  readonly error?: string;
  readonly app_id: string;
  readonly app_name: string;
  readonly fn_id: string;
  /** The path the caller used (the trigger's, or /invoke/{fnID}). */
  readonly path: string;
  readonly created_at: string;
  readonly started_at?: string;
  /** Absent while a detached call waits in the queue. */
  readonly completed_at?: string;
  readonly stats: readonly CallStat[];
  readonly timings: CallTimings;
  /** Detached calls: how many times the call ran (retries included). */
  readonly attempts?: number;
}

/**
 * The most an LB puts in one batch of records and logs it hands the API node
 * (POST /v2/runner/calls; one log bigger than this goes alone).
 */
export const RECORD_BATCH_BYTES = 8 * 1024 * 1024;

/** The record of a detached call waiting in the queue (after `attempts` runs, the last failing with `error`). */
export function queuedRecord(call: Call, attempts = 0, error?: string): CallRecord {
  const record: { -readonly [K in keyof CallRecord]: CallRecord[K] } = {
    id: call.id,
    status: 'queued',
    app_id: call.fn.appId,
    app_name: call.fn.appName,
    fn_id: call.fn.fnId,
    path: pathOf(call.url),
    created_at: new Date(call.createdAt).toISOString(),
    stats: [],
    timings: { wait_ms: 0, exec_ms: 0 },
    attempts,
  };
  if (error !== undefined) record.error = error;
  return record;
}

/** The path of an absolute URL as the caller sent it ('/' when it has none): cheaper than parsing a URL per call. */
export function pathOf(url: string): string {
  const scheme = url.indexOf('://');
  const start = url.indexOf('/', scheme < 0 ? 0 : scheme + 3);
  if (start < 0) return '/';
  let end = url.length;
  const q = url.indexOf('?', start);
  if (q >= 0) end = q;
  const h = url.indexOf('#', start);
  if (h >= 0 && h < end) end = h;
  return url.slice(start, end);
}

/** A call record (Fn's Call as the calls API shows it) for `call` ending with `outcome`. */
export function callRecord(call: Call, outcome: CallOutcome): CallRecord {
  // Once per call when records are kept: plain assignments, no spreads.
  const record: { -readonly [K in keyof CallRecord]: CallRecord[K] } = {
    id: call.id,
    status: outcome.status,
    app_id: call.fn.appId,
    app_name: call.fn.appName,
    fn_id: call.fn.fnId,
    path: pathOf(call.url),
    created_at: outcome.createdAt,
    completed_at: outcome.completedAt,
    stats: outcome.stats,
    timings: outcome.timings,
  };
  if (outcome.error !== undefined) record.error = outcome.error;
  if (outcome.startedAt !== undefined) record.started_at = outcome.startedAt;
  return record;
}

/** Fn's call status for an answer's HTTP status (504 is a timeout, 499 a caller that left). */
export function callStatus(httpStatus: number): CallStatus {
  if (httpStatus === 504) return 'timeout';
  if (httpStatus === 499) return 'cancelled';
  return httpStatus >= 500 ? 'error' : 'success';
}
