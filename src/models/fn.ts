/**
 * Fn: a function — a container image plus the resources and config it runs with.
 */
import { annotationsEqual, mergeAnnotations, validateAnnotations, validateInvokeAuth, type Annotations } from './annotations.js';
import type { AppShape } from './app.js';
import { byteLength, configEqual, mergeConfig, mergeMap, newId, now, validateConfig, type ConfigMap } from './common.js';
import { INT32_MAX, INT32_MIN, optInteger, optString, optStringMap, optAnnotations, UINT64_MAX, type JsonObject } from './decode.js';
import { ApiError, E, MAX_IDLE_TIMEOUT_S, MAX_MEMORY_MB, MAX_NAME_LENGTH, MAX_TIMEOUT_S } from './errors.js';
import { imageRefProblem } from './image.js';

export const DEFAULT_MEMORY_MB = 128;
export const DEFAULT_TIMEOUT_S = 30;
export const DEFAULT_IDLE_TIMEOUT_S = 30;

/**
 * How the agent talks to the function's container: `http-stream` (the FDKs'
 * unix-socket protocol, the default), the hot stdin/stdout formats `http`,
 * `json` and `cloudevent`, or `default`: one cold container per call.
 */
export const FN_FORMATS = ['http-stream', 'http', 'json', 'cloudevent', 'default'] as const;
export type FnFormat = (typeof FN_FORMATS)[number];
export const DEFAULT_FORMAT: FnFormat = 'http-stream';

/** How many times a failing detached call of the fn runs (1-10; default 3). */
export const ASYNC_MAX_ATTEMPTS_ANNOTATION = 'fnts.io/async-max-attempts';

/** The annotation carrying the URL that invokes the fn. */
export const FN_INVOKE_ENDPOINT_ANNOTATION = 'fnproject.io/fn/invokeEndpoint';

export interface Fn {
  readonly id: string;
  readonly name: string;
  readonly app_id: string;
  readonly image: string;
  /** MiB */
  readonly memory: number;
  /** seconds */
  readonly timeout: number;
  /** seconds */
  readonly idle_timeout: number;
  readonly format: FnFormat;
  readonly config: ConfigMap;
  readonly annotations: Annotations;
  /** Its app's shape (Fn takes no shape of a fn's own); undefined when the app has none. */
  readonly shape: AppShape | undefined;
  readonly created_at: string;
  readonly updated_at: string;
}

export interface FnPatch {
  readonly id?: string | undefined;
  readonly name?: string | undefined;
  readonly app_id?: string | undefined;
  readonly image?: string | undefined;
  readonly memory?: number | undefined;
  readonly timeout?: number | undefined;
  readonly idle_timeout?: number | undefined;
  readonly format?: string | undefined;
  readonly config?: ConfigMap | undefined;
  readonly annotations?: Annotations | undefined;
}

/**
 * Characters Go's url.PathEscape leaves alone: Fn accepts a fn name only if
 * escaping it as a path segment changes nothing.
 */
const PATH_SAFE_NAME = /^[A-Za-z0-9\-_.~$&+:=@]+$/;

function fnFieldsFromJson(body: JsonObject): FnPatch {
  return {
    id: optString(body, 'id'),
    name: optString(body, 'name'),
    app_id: optString(body, 'app_id'),
    image: optString(body, 'image'),
    memory: optInteger(body, 'memory', 0, UINT64_MAX),
    timeout: optInteger(body, 'timeout', INT32_MIN, INT32_MAX),
    idle_timeout: optInteger(body, 'idle_timeout', INT32_MIN, INT32_MAX),
    format: optString(body, 'format'),
    config: optStringMap(body, 'config'),
    annotations: optAnnotations(body, 'annotations'),
  };
}

function validateFn(fn: Fn): void {
  if (fn.name === '') throw new ApiError(E.FnsMissingName);
  if (byteLength(fn.name) > MAX_NAME_LENGTH) throw new ApiError(E.FnsTooLongName);
  if (!PATH_SAFE_NAME.test(fn.name)) throw new ApiError(E.FnsInvalidName);
  if (fn.app_id === '') throw new ApiError(E.FnsMissingAppID);
  if (fn.image.trim() === '') throw new ApiError(E.FnsMissingImage);
  const imageProblem = imageRefProblem(fn.image);
  if (imageProblem !== undefined) throw new ApiError(E.FnsInvalidImage, { message: `${E.FnsInvalidImage.message}: ${imageProblem}` });
  if (!(FN_FORMATS as readonly string[]).includes(fn.format)) throw new ApiError(E.FnsInvalidFormat);
  if (fn.timeout <= 0 || fn.timeout > MAX_TIMEOUT_S) throw new ApiError(E.FnsInvalidTimeout);
  if (fn.idle_timeout <= 0 || fn.idle_timeout > MAX_IDLE_TIMEOUT_S) throw new ApiError(E.FnsInvalidIdleTimeout);
  if (fn.memory < 1 || fn.memory > MAX_MEMORY_MB) throw new ApiError(E.InvalidMemory);
  validateAnnotations(fn.annotations);
  validateInvokeAuth(fn.annotations);
  const attempts = fn.annotations[ASYNC_MAX_ATTEMPTS_ANNOTATION];
  if (attempts !== undefined && !(typeof attempts === 'number' && Number.isInteger(attempts) && attempts >= 1 && attempts <= 10)) {
    throw new ApiError(E.InvalidAsyncMaxAttempts);
  }
  validateConfig(fn.config);
}

/**
 * Builds a new fn from a create request body: zero values take the defaults
 * (memory 128, timeout 30, idle_timeout 30). The app's shape is filled in by
 * the datastore, which knows the app.
 */
export function newFnFromJson(body: JsonObject): Fn {
  const f = fnFieldsFromJson(body);
  if (f.id) throw new ApiError(E.FnsIDProvided);
  if (!f.app_id) throw new ApiError(E.FnsMissingAppID);
  if (!f.name) throw new ApiError(E.FnsMissingName);
  const created = now();
  const fn: Fn = {
    id: newId(),
    name: f.name,
    app_id: f.app_id,
    image: f.image ?? '',
    memory: f.memory || DEFAULT_MEMORY_MB,
    timeout: f.timeout || DEFAULT_TIMEOUT_S,
    idle_timeout: f.idle_timeout || DEFAULT_IDLE_TIMEOUT_S,
    format: (f.format || DEFAULT_FORMAT) as FnFormat,
    config: f.config ?? {},
    annotations: f.annotations ?? {},
    shape: undefined,
    created_at: created,
    updated_at: created,
  };
  validateFn(fn);
  return fn;
}

export function fnPatchFromJson(body: JsonObject): FnPatch {
  return fnFieldsFromJson(body);
}

/**
 * Applies `patch` to `current`: zero values mean "unchanged", config and
 * annotations merge. A different name is ignored, as Fn ignores it (200, the
 * fn keeps its name); a different app is refused.
 */
export function applyFnPatch(current: Fn, patch: FnPatch): Fn {
  if (patch.app_id && patch.app_id !== current.app_id) throw new ApiError(E.FnsAppImmutable);
  const next: Fn = {
    ...current,
    image: patch.image || current.image,
    memory: patch.memory || current.memory,
    timeout: patch.timeout || current.timeout,
    idle_timeout: patch.idle_timeout || current.idle_timeout,
    format: (patch.format || current.format) as FnFormat,
    config: mergeConfig(current.config, patch.config),
    annotations: mergeAnnotations(current.annotations, patch.annotations),
  };
  validateFn(next);
  const changed =
    next.image !== current.image ||
    next.memory !== current.memory ||
    next.timeout !== current.timeout ||
    next.idle_timeout !== current.idle_timeout ||
    next.format !== current.format ||
    !configEqual(next.config, current.config) ||
    !annotationsEqual(next.annotations, current.annotations);
  return changed ? { ...next, updated_at: now() } : current;
}

/** The fn as the API shows it; `extraAnnotations` are added for display only (e.g. the invoke endpoint). */
export function fnToJson(fn: Fn, extraAnnotations: Record<string, unknown> = {}): Record<string, unknown> {
  const annotations = mergeMap(fn.annotations, extraAnnotations, () => false);
  const out: Record<string, unknown> = {
    id: fn.id,
    name: fn.name,
    app_id: fn.app_id,
    image: fn.image,
    memory: fn.memory,
    timeout: fn.timeout,
    idle_timeout: fn.idle_timeout,
    format: fn.format,
    config: fn.config,
  };
  if (Object.keys(annotations).length > 0) out['annotations'] = annotations;
  if (fn.shape !== undefined) out['shape'] = fn.shape;
  out['created_at'] = fn.created_at;
  out['updated_at'] = fn.updated_at;
  return out;
}
