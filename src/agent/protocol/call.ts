/**
 * What travels between the agent and a function, whatever the format: the
 * call as the caller made it, the answer meant for the caller.
 */
import type { Readable } from 'node:stream';
import type { Call } from '../../models/index.js';
import type { RawHeaders } from './headers.js';

/** A call's request body: none, read whole, or a stream. */
export type CallBody = Readable | Buffer | null;

/** A call and its body, as a format sends it to the function. */
export interface CallRequest {
  readonly call: Call;
  readonly body: CallBody;
  /** The streamed body's length when the caller declared it. */
  readonly bodyLength?: number | undefined;
}

/** How the request body is framed to the container: its length, or chunked when unknown. */
export function bodyFraming(req: CallRequest): number | 'chunked' {
  return req.body === null ? 0 : Buffer.isBuffer(req.body) ? req.body.length : (req.bodyLength ?? 'chunked');
}

export interface CallResponse {
  readonly status: number;
  /** Headers for the caller (hop-by-hop ones and Content-Length removed). */
  readonly headers: RawHeaders;
  /** A Buffer when the whole body was read; else a stream of it. */
  readonly body: Buffer | Readable;
}

export interface ExchangeOptions {
  readonly deadline: Date;
  /** The most bytes an answer may have (responseLimit()); Infinity = no limit. */
  readonly responseLimit: number;
}

/** FN_MAX_RESPONSE_SIZE as the one limit every format and the cold path apply: 0 means no limit. */
export function responseLimit(maxResponseBytes: number): number {
  return maxResponseBytes > 0 ? maxResponseBytes : Infinity;
}

/**
 * A call in flight. cancel() abandons it and fails the response (or its
 * stream) with `reason`; a no-op once the response has ended.
 *
 * (A cancel function rather than an AbortSignal: this runs once per call,
 * and an AbortController per call costs more than the exchange itself.)
 */
export interface Exchange {
  readonly response: Promise<CallResponse>;
  cancel(reason: unknown): void;
}

let rfcSecond = NaN;
let rfcText = '';

/** Go's time.RFC3339 ("2006-01-02T15:04:05Z07:00"), as Fn sends Fn-Deadline; one format per second. */
export function rfc3339(date: Date): string {
  const second = Math.floor(date.getTime() / 1000);
  if (second !== rfcSecond) {
    rfcSecond = second;
    rfcText = `${date.toISOString().slice(0, 19)}Z`;
  }
  return rfcText;
}
