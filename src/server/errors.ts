/**
 * The one error mapper: any thrown value becomes Fn's HTTP answer,
 * `{"message": "..."}` with the catalog's status. Errors outside the catalog
 * are logged with their stack and answered with a bare 500.
 */
import type { FastifyBaseLogger } from 'fastify';
import { ApiError, E } from '../models/index.js';

export interface HttpError {
  readonly status: number;
  readonly headers: Readonly<Record<string, string>>;
  readonly body: { readonly message: string };
}

/** Fastify's own errors that are the client's fault, by Fastify error code. */
const FRAMEWORK_ERRORS: Readonly<Record<string, typeof E.InvalidJSON>> = {
  FST_ERR_CTP_BODY_TOO_LARGE: E.RequestContentTooBig,
  FST_ERR_CTP_INVALID_MEDIA_TYPE: E.InvalidJSON,
  FST_ERR_CTP_EMPTY_JSON_BODY: E.InvalidJSON,
  FST_ERR_CTP_INVALID_CONTENT_LENGTH: E.InvalidJSON,
  FST_ERR_BAD_URL: E.PathMalformed,
  FST_ERR_ASYNC_CONSTRAINT: E.PathMalformed,
};

export function toHttpError(err: unknown, log: FastifyBaseLogger): HttpError {
  if (err instanceof ApiError) {
    if (err.status >= 500) log.error({ err, code: err.code }, 'api error');
    return { status: err.status, headers: err.headers, body: { message: err.message } };
  }
  const code = (err as { code?: unknown } | null)?.code;
  if (typeof code === 'string') {
    const known = FRAMEWORK_ERRORS[code];
    if (known) return { status: known.status, headers: {}, body: { message: known.message } };
  }
  log.error({ err }, 'internal server error');
  return { status: E.InternalServerError.status, headers: {}, body: { message: E.InternalServerError.message } };
}
