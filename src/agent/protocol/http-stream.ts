/**
 * The http-stream FDK protocol, client side: one HTTP/1.1 `POST /call` per
 * call over the container's unix socket, on one kept-alive connection.
 *
 * Request headers: the call's own (for an HTTP trigger already carrying
 * Fn-Http-Method, Fn-Http-Request-Url and Fn-Http-H-*), plus Fn-Call-Id and
 * Fn-Deadline (RFC 3339). The answer's status, headers and body come back
 * as they are; mapping them for triggers is the server's business.
 *
 * The response body is buffered up to a limit so that an oversized answer
 * can still be turned into a clean 502; past the limit (only possible when
 * FN_MAX_RESPONSE_SIZE is unset or large) it is streamed, and a stream that
 * outgrows FN_MAX_RESPONSE_SIZE is cut.
 */
import { Readable } from 'node:stream';
import { ApiError, E, FunctionError } from '../../models/index.js';
import { requestHead, sameName, type ContainerConnection, type RawHeaders } from './http1.js';

export type { RawHeaders } from './http1.js';

export interface CallRequest {
  readonly id: string;
  /** For an HTTP trigger already carrying Fn-Http-Method, Fn-Http-Request-Url and Fn-Http-H-*. */
  readonly headers: RawHeaders;
  /** null for no body; a Buffer when already read; else streamed. */
  readonly body: Readable | Buffer | null;
  /** The streamed body's length when the caller declared it. */
  readonly bodyLength?: number | undefined;
}

export interface CallResponse {
  readonly status: number;
  /** The function's headers, hop-by-hop ones and Content-Length removed. */
  readonly headers: RawHeaders;
  /** A Buffer when the whole body was read; else a stream of it. */
  readonly body: Buffer | Readable;
}

/** Headers that describe one connection hop and must not be forwarded (RFC 9110 7.6.1). */
const HOP_HEADERS = new Set(['connection', 'keep-alive', 'proxy-connection', 'proxy-authenticate', 'proxy-authorization', 'te', 'trailer', 'transfer-encoding', 'upgrade', 'host']);
const HOP_LENGTHS = new Set([...HOP_HEADERS].map((h) => h.length));

/**
 * Drops hop-by-hop headers (and those the Connection header names) from raw
 * headers, and `also` when given. Runs twice per call: names are lower-cased
 * only when their length matches a hop header's.
 */
export function withoutHopHeaders(raw: RawHeaders, also = ''): RawHeaders {
  const out: RawHeaders = [];
  let listed: string[] | undefined;
  for (let i = 0; i + 1 < raw.length; i += 2) {
    const name = raw[i]!;
    const n = name.length;
    if (HOP_LENGTHS.has(n) || n === also.length) {
      const lower = name.toLowerCase();
      if (lower === 'connection') listed = raw[i + 1]!.toLowerCase().split(',').map((x) => x.trim());
      if (HOP_HEADERS.has(lower) || lower === also) continue;
    }
    out.push(name, raw[i + 1]!);
  }
  if (listed === undefined) return out;
  // Headers the Connection header names are hop-by-hop too.
  const named = listed;
  const kept: RawHeaders = [];
  for (let i = 0; i < out.length; i += 2) if (!named.includes(out[i]!.toLowerCase())) kept.push(out[i]!, out[i + 1]!);
  return kept;
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

/** Bodies up to this size are read whole before answering (Fn buffers every answer). */
const STREAM_AFTER_BYTES = 1024 * 1024;

export interface ExchangeOptions {
  readonly deadline: Date;
  /** FN_MAX_RESPONSE_SIZE; 0 = no limit. */
  readonly maxResponseBytes: number;
}

/**
 * A call in flight. cancel() drops the connection and fails the response (or
 * its stream) with `reason`; it is a no-op once the response has ended.
 */
export interface Exchange {
  readonly response: Promise<CallResponse>;
  cancel(reason: unknown): void;
}

/**
 * Sends one call over the container's connection and reads the answer.
 * Rejects with FunctionError `FunctionResponseTooBig` for an oversized body,
 * `FunctionResponse` when the container does not answer properly, or the
 * reason given to cancel(). A body over the buffering limit is streamed; a
 * stream that outgrows FN_MAX_RESPONSE_SIZE is cut.
 *
 * (A cancel function rather than an AbortSignal: this runs once per call,
 * and an AbortController per call costs more than the rest of this file.)
 */
export function exchange(conn: ContainerConnection, req: CallRequest, opts: ExchangeOptions): Exchange {
  const headers = req.headers.concat('Fn-Call-Id', req.id, 'Fn-Deadline', rfc3339(opts.deadline));
  const length = req.body === null ? 0 : Buffer.isBuffer(req.body) ? req.body.length : (req.bodyLength ?? 'chunked');
  const head = requestHead('/call', headers, length);
  const max = opts.maxResponseBytes > 0 ? opts.maxResponseBytes : Infinity;
  const bufferLimit = Math.min(max, STREAM_AFTER_BYTES);

  let cancel: (reason: unknown) => void = () => undefined;
  const response = new Promise<CallResponse>((resolve, reject) => {
    let response: { status: number; headers: RawHeaders } | undefined;
    const chunks: Buffer[] = [];
    let size = 0;
    let stream: Readable | undefined;
    let done = false;
    let ended = false;

    const fail = (err: unknown): void => {
      if (stream) stream.destroy(err as Error);
      else if (!done) {
        done = true;
        reject(err);
      }
    };
    cancel = (reason) => {
      if (ended) return;
      ended = true;
      conn.destroy();
      fail(reason);
    };

    const resume = conn.send(head, req.body, {
      head: (h) => {
        response = { status: h.status, headers: withoutHopHeaders(h.headers, 'content-length') };
      },
      data: (chunk) => {
        size += chunk.length;
        if (size > max) {
          conn.destroy();
          fail(new FunctionError(E.FunctionResponseTooBig));
          return false;
        }
        if (stream) return stream.push(chunk);
        chunks.push(chunk);
        if (size > bufferLimit) {
          // Too big to hold: hand over a stream of what came and what follows.
          stream = new Readable({
            read: () => resume(),
            destroy: (err, cb) => {
              // Abandoned mid-answer: the connection holds the rest, so it goes.
              if (!ended) {
                ended = true;
                conn.destroy();
              }
              cb(err);
            },
          });
          for (const c of chunks.splice(0)) stream.push(c);
          done = true;
          resolve({ status: response!.status, headers: response!.headers, body: stream });
        }
        return true;
      },
      end: () => {
        ended = true;
        if (stream) {
          stream.push(null);
          return;
        }
        done = true;
        resolve({
          status: response!.status,
          headers: response!.headers,
          body: chunks.length === 1 ? chunks[0]! : Buffer.concat(chunks, size),
        });
      },
      error: (err) => {
        ended = true;
        if (err instanceof ApiError) fail(err);
        else fail(new FunctionError(E.FunctionResponse, { cause: err }));
      },
    });
  });
  return { response, cancel: (reason) => cancel(reason) };
}
