/**
 * The error catalog: every error an fnts user can see, with a stable `code`,
 * the HTTP status and the exact message Fn answers with (`{"message": ...}`).
 *
 * Errors are thrown as `ApiError` (the caller's or the platform's doing) or
 * `FunctionError` (the user's function misbehaved: crash, OOM, timeout, bad
 * response). `server/` maps any error to an HTTP answer in one place; an error
 * that is not an `ApiError` becomes a 500 whose details are logged, never sent.
 */

export interface ErrorDef {
  /** Stable identifier, safe to match on in code and logs. */
  readonly code: string;
  readonly status: number;
  readonly message: string;
}

function def(code: string, status: number, message: string): ErrorDef {
  return Object.freeze({ code, status, message });
}

export const MAX_MEMORY_MB = 8 * 1024;
export const MAX_TIMEOUT_S = 300;
export const MAX_IDLE_TIMEOUT_S = 3600;
export const MAX_NAME_LENGTH = 255;
export const MAX_ANNOTATION_KEY_BYTES = 128;
export const MAX_ANNOTATION_VALUE_BYTES = 512;
export const MAX_ANNOTATION_KEYS = 100;
/**
 * Config becomes the container's environment: one entry must stay under
 * Linux's 128 KiB per string (the exec fails above it), and an app's and
 * its fn's together well under the ~1 MiB the Docker engine takes in a
 * container's definition (it answers 431 above it). So each of an app's and
 * a fn's config holds at most MAX_CONFIG_BYTES, in entries of at most
 * MAX_CONFIG_KEY_BYTES and MAX_CONFIG_VALUE_BYTES.
 */
export const MAX_CONFIG_KEY_BYTES = 256;
export const MAX_CONFIG_VALUE_BYTES = 64 * 1024;
export const MAX_CONFIG_BYTES = 256 * 1024;
/**
 * Secrets (models/secret.ts) become files in a tmpfs on the host, one per
 * container of the fn, whose memory no fn's limit counts: so an app and a
 * fn hold at most MAX_SECRETS each, of at most MAX_SECRET_VALUE_BYTES each
 * and MAX_SECRETS_BYTES in all (as much as config).
 */
export const MAX_SECRET_VALUE_BYTES = 64 * 1024;
export const MAX_SECRETS = 100;
export const MAX_SECRETS_BYTES = 256 * 1024;
/** A secret's name is a file name too (Linux's NAME_MAX). */
export const MAX_SECRET_NAME_BYTES = 255;

/** Catalog entries, named after Fn's. Messages are Fn's words, byte for byte. */
export const E = Object.freeze({
  // generic request errors
  InvalidJSON: def('InvalidJSON', 400, 'Invalid JSON'),
  MethodNotAllowed: def('MethodNotAllowed', 405, 'Method not allowed'),
  PathNotFound: def('PathNotFound', 404, 'Path not found'),
  PathMalformed: def('PathMalformed', 400, 'Path malformed'),
  RequestContentTooBig: def('RequestContentTooBig', 413, 'Request content too large'),
  InvalidCursor: def('InvalidCursor', 400, 'Invalid cursor'),
  MissingID: def('MissingID', 400, 'Missing ID'),
  MissingName: def('MissingName', 400, 'Missing Name'),
  InternalServerError: def('InternalServerError', 500, 'internal server error'),
  ServiceUnavailable: def('ServiceUnavailable', 503, 'Service is shutting down'),
  // Requests Node's HTTP parser refuses or the server stops waiting for. Fn
  // leaves most of these to Go's net/http, which answers in plain text; these
  // are the same statuses in Fn's JSON and sentence style.
  MalformedRequest: def('MalformedRequest', 400, 'Malformed HTTP request'),
  RequestTimeout: def('RequestTimeout', 408, 'Timed out receiving the request'),
  RequestURITooLong: def('RequestURITooLong', 414, 'Request URI too long'),
  RequestHeadersTooLarge: def('RequestHeadersTooLarge', 431, 'Request header fields too large'),
  HTTPVersionNotSupported: def('HTTPVersionNotSupported', 505, 'HTTP version not supported'),

  // apps
  AppIDProvided: def('AppIDProvided', 400, 'App ID cannot be supplied on create'),
  AppsIDMismatch: def('AppsIDMismatch', 400, 'App ID in path does not match ID in body'),
  AppsMissingID: def('AppsMissingID', 400, 'Missing app ID'),
  AppsTooLongName: def('AppsTooLongName', 400, `App name must be ${MAX_NAME_LENGTH} characters or less`),
  AppsInvalidName: def('AppsInvalidName', 400, 'Invalid app name'),
  AppsInvalidShape: def('AppsInvalidShape', 400, 'Invalid app shape'),
  AppsAlreadyExists: def('AppsAlreadyExists', 409, 'App already exists'),
  AppsNameImmutable: def('AppsNameImmutable', 409, 'Could not update - name is immutable'),
  AppsNotFound: def('AppsNotFound', 404, 'App not found'),
  // Fn builds this message from the URL ("invalid syslog url: ..."); see invalidSyslog().
  InvalidSyslog: def('InvalidSyslog', 400, 'invalid syslog url'),

  // fns
  FnsIDProvided: def('FnsIDProvided', 400, 'ID cannot be provided for Fn creation'),
  FnsIDMismatch: def('FnsIDMismatch', 400, 'Fn ID in path does not match that in body'),
  FnsMissingName: def('FnsMissingName', 400, 'Missing Fn name'),
  FnsTooLongName: def('FnsTooLongName', 400, `Fn name must be ${MAX_NAME_LENGTH} characters or less`),
  FnsInvalidName: def('FnsInvalidName', 400, 'name must be a valid string'),
  FnsMissingAppID: def('FnsMissingAppID', 400, 'Missing AppID on Fn'),
  FnsMissingImage: def('FnsMissingImage', 400, 'Missing image on Fn'),
  // fnts's own (Fn stores any string, and invoking it fails in the engine), worded like FnsMissingImage; the reason follows.
  FnsInvalidImage: def('FnsInvalidImage', 400, 'Invalid image on Fn'),
  FnsInvalidFormat: def('FnsInvalidFormat', 400, 'Invalid format on Fn'),
  FnsInvalidTimeout: def('FnsInvalidTimeout', 400, `timeout value is out of range, must be between 0 and ${MAX_TIMEOUT_S}`),
  FnsInvalidIdleTimeout: def('FnsInvalidIdleTimeout', 400, `idle_timeout value is out of range, must be between 0 and ${MAX_IDLE_TIMEOUT_S}`),
  InvalidMemory: def('InvalidMemory', 400, `memory value is out of range. It should be between 0 and ${MAX_MEMORY_MB}`),
  FnsNotFound: def('FnsNotFound', 404, 'Fn not found'),
  FnsExists: def('FnsExists', 409, 'Fn with specified name already exists'),
  FnsAppImmutable: def('FnsAppImmutable', 409, 'Could not update - app_id is immutable'),
  InvalidConfigKey: def('InvalidConfigKey', 400, "Invalid config key, config keys must be non-empty and must not contain '=' or NUL"),
  // fnts's own (Fn stores it, and the fn's containers then fail to start), worded like InvalidConfigKey.
  InvalidConfigValue: def('InvalidConfigValue', 400, 'Invalid config value, config values must not contain NUL'),
  // fnts's own (Fn stores any size, and the fn's containers then fail to start), worded like InvalidConfigKey.
  ConfigTooLarge: def(
    'ConfigTooLarge',
    400,
    `Invalid config, config keys must be at most ${MAX_CONFIG_KEY_BYTES} bytes, values at most ${MAX_CONFIG_VALUE_BYTES} bytes, and the whole config at most ${MAX_CONFIG_BYTES} bytes`,
  ),

  // triggers
  TriggerIDProvided: def('TriggerIDProvided', 400, 'ID cannot be provided for Trigger creation'),
  TriggerIDMismatch: def('TriggerIDMismatch', 400, 'ID in path does not match ID in body'),
  CreatedAtProvided: def('CreatedAtProvided', 400, 'Trigger Created At Provided for Create'),
  // Fn's own wording for this case, kept for compatibility.
  UpdatedAtProvided: def('UpdatedAtProvided', 400, 'Trigger ID Provided for Create'),
  TriggerMissingName: def('TriggerMissingName', 400, 'Missing name on Trigger'),
  TriggerTooLongName: def('TriggerTooLongName', 400, `Trigger name must be ${MAX_NAME_LENGTH} characters or less`),
  TriggerInvalidName: def('TriggerInvalidName', 400, 'Invalid name for Trigger'),
  TriggerMissingAppID: def('TriggerMissingAppID', 400, 'Missing App ID on Trigger'),
  TriggerMissingFnID: def('TriggerMissingFnID', 400, 'Missing Fn ID on Trigger'),
  TriggerFnIDNotSameApp: def('TriggerFnIDNotSameApp', 400, 'Invalid Fn ID - not owned by specified app'),
  TriggerTypeUnknown: def('TriggerTypeUnknown', 400, 'Trigger Type Not Supported'),
  TriggerMissingSource: def('TriggerMissingSource', 400, 'Missing Trigger Source'),
  TriggerMissingSourcePrefix: def('TriggerMissingSourcePrefix', 400, "Missing Trigger Source Prefix '/'"),
  TriggerInvalidSource: def('TriggerInvalidSource', 400, 'Invalid Trigger Source'),
  TriggerAppImmutable: def('TriggerAppImmutable', 409, 'Could not update - app_id is immutable'),
  TriggerTypeImmutable: def('TriggerTypeImmutable', 409, 'Could not update - type is immutable'),
  TriggerNotFound: def('TriggerNotFound', 404, 'Trigger not found'),
  CallNotFound: def('CallNotFound', 404, 'Call not found'),
  CallNotQueued: def('CallNotQueued', 503, 'The call could not be queued; try again'),
  CallNotDead: def('CallNotDead', 409, 'Only a detached call that failed its last attempt can be retried'),
  InvalidIdempotencyKey: def('InvalidIdempotencyKey', 400, 'Invalid Fn-Idempotency-Key, it may be at most 255 bytes'),
  CallLogNotFound: def('CallLogNotFound', 404, 'Call log not found'),
  InvalidFromTime: def('InvalidFromTime', 400, 'from_time is not an epoch time'),
  InvalidToTime: def('InvalidToTime', 400, 'to_time is not an epoch time'),
  TriggerExists: def('TriggerExists', 409, 'Trigger already exists'),
  TriggerSourceExists: def('TriggerSourceExists', 409, 'Trigger with the same type and source exists on this app'),

  // tokens (fnts: Fn has no authentication of its own)
  Unauthenticated: def('Unauthenticated', 401, "Authentication required: send 'Authorization: Bearer <token>' (the fn CLI sends FN_TOKEN)"),
  InvalidToken: def('InvalidToken', 401, 'Invalid token: it is unknown, revoked or expired'),
  Forbidden: def('Forbidden', 403, 'Forbidden: this token may not do this'),
  ForbiddenApp: def('ForbiddenApp', 403, 'Forbidden: this token may not use this app'),
  InvokeAuthUnavailable: def('InvokeAuthUnavailable', 401, 'This function takes calls with a token only (fnts.io/invoke-auth), and this server checks no tokens (FNTS_AUTH=off)'),
  TokenNotFound: def('TokenNotFound', 404, 'Token not found'),
  InvalidTokenName: def('InvalidTokenName', 400, 'Invalid token name: it must be a string of 1 to 255 characters'),
  InvalidTokenRole: def('InvalidTokenRole', 400, 'Invalid token role: use one of admin, developer, viewer, invoker, fleet'),
  InvalidTokenApps: def('InvalidTokenApps', 400, 'Invalid token apps: it must be a list of app names'),
  InvalidTokenExpiry: def('InvalidTokenExpiry', 400, 'Invalid expires_at: it must be an RFC 3339 time in the future'),

  // calls
  CallTimeoutServerBusy: def('CallTimeoutServerBusy', 503, 'Timed out - server too busy'),
  CallTimeout: def('CallTimeout', 504, 'Timed out'),
  CallResourceTooBig: def('CallResourceTooBig', 400, 'Requested CPU/Memory cannot be allocated'),
  ClientCancelled: def('ClientCancelled', 499, 'Client cancelled context'),
  FunctionResponseTooBig: def('FunctionResponseTooBig', 502, 'function response body too large'),
  FunctionResponse: def('FunctionResponse', 502, 'error receiving function response'),
  FunctionFailed: def('FunctionFailed', 502, 'function failed'),
  FunctionInvalidResponse: def('FunctionInvalidResponse', 502, 'invalid function response'),
  ContainerInitFail: def('ContainerInitFail', 502, 'Container failed to initialize, please ensure you are using the latest fdk and check the logs'),
  ContainerInitTimeout: def('ContainerInitTimeout', 504, 'Container initialization timed out, please ensure you are using the latest fdk and check the logs'),
  ImageUnavailable: def('ImageUnavailable', 502, 'Failed to pull image'),
  DockerPullTimeout: def('DockerPullTimeout', 502, 'Image pull timed out'),
  ContainerEngine: def('ContainerEngine', 503, 'Container engine unavailable'),

  // secrets (fnts's own: Fn has none), worded like config's
  InvalidSecretName: def(
    'InvalidSecretName',
    400,
    `Invalid secret name, secret names are config keys that are also file names: non-empty, at most ${MAX_SECRET_NAME_BYTES} bytes, without '=', '/' or NUL, and not '.' or '..'`,
  ),
  MissingSecretValue: def('MissingSecretValue', 400, 'Missing secret value, send {"value": "..."}'),
  SecretTooLarge: def('SecretTooLarge', 400, `Invalid secret value, secret values must be at most ${MAX_SECRET_VALUE_BYTES} bytes`),
  TooManySecrets: def('TooManySecrets', 400, `Invalid secret, an app or fn may hold at most ${MAX_SECRETS} secrets of at most ${MAX_SECRETS_BYTES} bytes in all`),
  SecretNotFound: def('SecretNotFound', 404, 'Secret not found'),
  // A container could not be given its fn's secrets (the server log says why); it is not started.
  SecretsUnavailable: def('SecretsUnavailable', 500, "Could not read the function's secrets, see the server log"),

  // annotations
  InvalidAnnotationKey: def('InvalidAnnotationKey', 400, 'Invalid annotation key, annotation keys must be non-empty ascii strings excluding whitespace'),
  InvalidAnnotationKeyLength: def('InvalidAnnotationKeyLength', 400, `Invalid annotation key length, annotation keys may not be larger than ${MAX_ANNOTATION_KEY_BYTES} bytes`),
  InvalidAnnotationValue: def('InvalidAnnotationValue', 400, 'Invalid annotation value, annotation values may only be non-empty strings, numbers, objects, or arrays'),
  InvalidAnnotationValueLength: def(
    'InvalidAnnotationValueLength',
    400,
    `Invalid annotation value length, annotation values may not be larger than ${MAX_ANNOTATION_VALUE_BYTES} bytes when serialized as JSON`,
  ),
  InvalidAsyncMaxAttempts: def('InvalidAsyncMaxAttempts', 400, 'Invalid annotation fnts.io/async-max-attempts, it must be a whole number from 1 to 10'),
  InvalidRunnerGroup: def(
    'InvalidRunnerGroup',
    400,
    "Invalid annotation fnts.io/runner-group, it must be a string of 1 to 40 lower case letters, digits and '-', starting and ending with a letter or digit",
  ),
  InvalidInvokeAuth: def('InvalidInvokeAuth', 400, 'Invalid annotation fnts.io/invoke-auth, it must be "token" (calls need a token) or be removed'),
  TooManyAnnotationKeys: def('TooManyAnnotationKeys', 400, `Invalid annotation change, new key(s) exceed maximum permitted number of annotations keys (${MAX_ANNOTATION_KEYS})`),
} as const);

export type ErrorName = keyof typeof E;

/** An error the caller or the platform caused; carries its HTTP answer. */
export class ApiError extends Error {
  override readonly name: string = 'ApiError';
  readonly code: string;
  readonly status: number;
  /** Extra response headers, e.g. Retry-After. */
  readonly headers: Readonly<Record<string, string>>;

  constructor(d: ErrorDef, options: { message?: string; cause?: unknown; headers?: Record<string, string> } = {}) {
    super(options.message ?? d.message, options.cause === undefined ? undefined : { cause: options.cause });
    this.code = d.code;
    this.status = d.status;
    this.headers = Object.freeze({ ...options.headers });
  }

  /** True when `err` is an ApiError made from catalog entry `d`. */
  static is(err: unknown, d: ErrorDef): err is ApiError {
    return err instanceof ApiError && err.code === d.code;
  }
}

/** An error caused by the user's function rather than by fnts or the caller. */
export class FunctionError extends ApiError {
  override readonly name = 'FunctionError';
}

export function apiError(d: ErrorDef, options?: { message?: string; cause?: unknown; headers?: Record<string, string> }): ApiError {
  return new ApiError(d, options);
}

/** Fn's 404/405 answers name the method and path: "Path not found: GET /x". */
export function routeError(d: ErrorDef, method: string, path: string): ApiError {
  return new ApiError(d, { message: `${d.message}: ${method} ${path}` });
}

/** Fn: `invalid syslog url: "<url>" <reason>`. */
export function invalidSyslog(url: string, reason: string): ApiError {
  return new ApiError(E.InvalidSyslog, { message: `invalid syslog url: "${url}" ${reason}` });
}

/**
 * An error another node reported (a runner's CallFinished, an API node's
 * answer): its status and words as they came. `user`: the function caused it.
 */
export function remoteError(status: number, message: string, user = false): ApiError {
  const d = catalogEntry(status, message) ?? def('Remote', status >= 400 && status <= 599 ? status : 500, message);
  return user ? new FunctionError(d) : new ApiError(d);
}

/** Catalog entries by status and words: how an error that crossed the wire (where only those travel) is known again. */
const BY_WORDS = new Map<string, ErrorDef>();

/** The catalog's entry of that status with exactly those words, if any. */
function catalogEntry(status: number, message: string): ErrorDef | undefined {
  if (BY_WORDS.size === 0) for (const d of Object.values(E)) BY_WORDS.set(`${d.status} ${d.message}`, d);
  return BY_WORDS.get(`${status} ${message}`);
}

/** The catalog code of `err`: an ApiError's own, InternalServerError for anything else. */
export function errorCode(err: unknown): string {
  return err instanceof ApiError ? err.code : E.InternalServerError.code;
}
