/**
 * What travels between the agent and a function, whatever the format: the
 * call and its body as a format sends it, and an exchange in flight. The
 * call's body, its answer and the header helpers every role shares live in
 * call/ (re-exported here for the formats).
 */
import { type CallBody, type CallResponse, HOP_HEADERS } from '../../call/index.js';
import type { Call } from '../../models/index.js';

export type { CallBody, CallResponse, RawHeaders } from '../../call/index.js';
export { canonical, headerLists, sameName, wholeBody, withoutHeaders, withoutHopHeaders } from '../../call/index.js';

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

/**
 * True for names a request head written by the agent frames itself: the
 * hop-by-hop ones, Content-Length and Expect.
 */
export function isFraming(lowerName: string): boolean {
  return HOP_HEADERS.has(lowerName) || lowerName === 'content-length' || lowerName === 'expect';
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
