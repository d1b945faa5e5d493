/**
 * The one error mapper: any thrown value becomes Fn's HTTP answer,
 * `{"message": "..."}` with the catalog's status. Errors outside the catalog
 * are logged with their stack and answered with a bare 500.
 *
 * Three sources feed it: errors thrown by handlers, Fastify's own errors
 * (a body too large, a URL it cannot decode), and the errors Node's HTTP
 * parser raises before any handler runs (`clientErrorToHttp`).
 */
import type { FastifyBaseLogger } from 'fastify';
import { StorageFullError } from '../datastore/index.js';
import { ApiError, E, FunctionError, routeError, type ErrorDef } from '../models/index.js';

export interface HttpError {
  readonly status: number;
  readonly headers: Readonly<Record<string, string>>;
  readonly body: { readonly message: string };
}

/**
 * Fastify's errors that a request can cause, by Fastify error code (every
 * code in fastify's lib/errors.js whose status is 4xx, less the one raised
 * only by our own setup code). A test walks Fastify's list so that a code a
 * Fastify upgrade adds is noticed.
 */
const FRAMEWORK_ERRORS: Readonly<Record<string, ErrorDef>> = {
  FST_ERR_CTP_BODY_TOO_LARGE: E.RequestContentTooBig,
  FST_ERR_CTP_INVALID_MEDIA_TYPE: E.InvalidJSON,
  FST_ERR_CTP_EMPTY_JSON_BODY: E.InvalidJSON,
  FST_ERR_CTP_INVALID_JSON_BODY: E.InvalidJSON,
  FST_ERR_CTP_INVALID_CONTENT_LENGTH: E.InvalidJSON,
  FST_ERR_VALIDATION: E.InvalidJSON,
  FST_ERR_ROUTE_MISSING_CONTENT_TYPE: E.InvalidJSON,
  FST_ERR_ROUTE_MISSING_CONTENT: E.InvalidJSON,
  FST_ERR_NOT_FOUND: E.PathNotFound,
  FST_ERR_BAD_URL: E.PathMalformed,
  FST_ERR_INVALID_URL: E.PathMalformed,
  FST_ERR_MAX_PARAM_LENGTH: E.RequestURITooLong,
  // A 500 in Fastify's list, but it is raised only while routing a request's URL.
  FST_ERR_ASYNC_CONSTRAINT: E.PathMalformed,
};

function answer(d: ErrorDef, message = d.message): HttpError {
  return { status: d.status, headers: {}, body: { message } };
}

export function toHttpError(err: unknown, log: FastifyBaseLogger): HttpError {
  if (err instanceof ApiError) {
    // A full disk is the operator's to fix, not a bug: its words, without a stack, for each refused change.
    if (err instanceof StorageFullError) log.warn({ code: err.code }, err.message);
    // A function's failure is its author's to see (in the answer and the call's record), not the operator's.
    else if (err instanceof FunctionError) log.debug({ code: err.code, status: err.status }, err.message);
    // The platform's own answers (busy, an image that cannot be had, the engine away): their words once, no stack.
    else if (err.status >= 500 && err.code !== E.InternalServerError.code) log.warn({ code: err.code, status: err.status }, err.message);
    else if (err.status >= 500) log.error({ err, code: err.code }, 'api error');
    return { status: err.status, headers: err.headers, body: { message: err.message } };
  }
  const code = (err as { code?: unknown } | null)?.code;
  if (typeof code === 'string') {
    const known = FRAMEWORK_ERRORS[code];
    if (known) return answer(known);
  }
  log.error({ err }, 'internal server error');
  return answer(E.InternalServerError);
}

/** True for the error a request stream ends with when its client hung up before sending all of it. */
export function isClientAbort(err: unknown): boolean {
  return (err as { code?: unknown } | null)?.code === 'ECONNRESET';
}

/** What Node's parser tells a 'clientError' listener (see node:http, event 'clientError'). */
export interface ClientError extends Error {
  readonly code?: string;
  /** The chunk being parsed when the parser gave up (a Buffer). */
  readonly rawPacket?: unknown;
  readonly bytesParsed?: number;
}

export interface ClientErrorContext {
  /** Whether `path` is served (so an unknown method on it is Fn's 405, not 404). */
  isServedPath(path: string): boolean;
  /** Whether the parser failed inside the body of a request to an API path (a JSON body, not a call's). */
  readonly inApiBody: boolean;
}

const TOKEN = /^[!#$%&'*+.^_`|~0-9A-Za-z-]+$/;

/** The request line around the point the parser failed: `FOO /v2/apps HTTP/1.1` -> FOO, /v2/apps. */
function requestLine(err: ClientError): { method: string; path: string } | undefined {
  const raw = err.rawPacket;
  if (!Buffer.isBuffer(raw)) return undefined;
  const at = Math.min(Math.max(err.bytesParsed ?? 0, 0), raw.length);
  // lastIndexOf with a negative offset would count from the end.
  const start = at === 0 ? 0 : raw.lastIndexOf(0x0a, at - 1) + 1;
  const end = raw.indexOf(0x0a, start);
  const parts = raw
    .toString('latin1', start, end < 0 ? raw.length : end)
    .replace(/\r$/, '')
    .split(' ');
  if (parts.length !== 3 || !TOKEN.test(parts[0]!) || !parts[1]!.startsWith('/') || !/^HTTP\/\d\.\d$/.test(parts[2]!)) return undefined;
  const target = parts[1]!;
  const q = target.indexOf('?');
  return { method: parts[0]!, path: q < 0 ? target : target.slice(0, q) };
}

/**
 * Fn's answer to a request Node's parser refused, or undefined when there is
 * nobody to answer (the client reset the connection). Fn (Go's net/http)
 * answers these with a status and a plain-text body; fnts gives the same
 * status with a `{"message"}` body, and where Fn itself answers (an unknown
 * method, a broken API body) its exact words.
 */
export function clientErrorToHttp(err: ClientError, ctx: ClientErrorContext): HttpError | undefined {
  switch (err.code) {
    case 'ECONNRESET':
      return undefined;
    case 'ERR_HTTP_REQUEST_TIMEOUT':
      return answer(E.RequestTimeout);
    case 'HPE_HEADER_OVERFLOW':
      return answer(E.RequestHeadersTooLarge);
    case 'HPE_CHUNK_EXTENSIONS_OVERFLOW':
      return answer(E.RequestContentTooBig);
    case 'HPE_INVALID_VERSION':
      return answer(E.HTTPVersionNotSupported);
    case 'HPE_INVALID_METHOD': {
      // Node parses a fixed list of methods; Fn routes any token, answering 405 on its paths.
      const line = requestLine(err);
      if (!line) return answer(E.MalformedRequest);
      const d = ctx.isServedPath(line.path) ? E.MethodNotAllowed : E.PathNotFound;
      const routed = routeError(d, line.method, line.path);
      return answer(d, routed.message);
    }
    default:
      // A body that breaks its framing (bad chunk sizes, say) half way: Fn's
      // API reads the body as JSON and answers Invalid JSON.
      if (ctx.inApiBody) return answer(E.InvalidJSON);
      return answer(E.MalformedRequest);
  }
}
