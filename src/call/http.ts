/**
 * A call's HTTP as every role handles it: its body, the answer meant for the
 * caller, and the header helpers the invoke endpoints, the agent's formats,
 * the LB and the runner share, with the one list of hop-by-hop headers
 * (never passed on between caller, agent and function: each hop frames its
 * own).
 */
import type { Readable } from 'node:stream';
import type { RawHeaders } from '../models/index.js';

export type { RawHeaders } from '../models/index.js';

/** A call's request body: none, read whole, or a stream. */
export type CallBody = Readable | Buffer | null;

/**
 * The whole of a call's body in one Buffer, for those who must hold all of
 * it: the LB until a runner has committed to the call (it may be sent to
 * several), the JSON formats that carry it inside their message. A stream
 * is read to its end; its error (the caller left, the body passed
 * FN_MAX_REQUEST_SIZE) is what this rejects with.
 */
export async function wholeBody(body: CallBody): Promise<Buffer> {
  if (body === null) return Buffer.alloc(0);
  if (Buffer.isBuffer(body)) return body;
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const chunk of body) {
    chunks.push(chunk as Buffer);
    size += (chunk as Buffer).length;
  }
  return chunks.length === 1 ? chunks[0]! : Buffer.concat(chunks, size);
}

export interface CallResponse {
  readonly status: number;
  /** Headers for the caller (hop-by-hop ones and Content-Length removed). */
  readonly headers: RawHeaders;
  /** A Buffer when the whole body was read; else a stream of it. */
  readonly body: Buffer | Readable;
}

/** Lower-cases ASCII only when needed (most names compared here are short). */
export function sameName(name: string, lower: string): boolean {
  return name.length === lower.length && (name === lower || name.toLowerCase() === lower);
}

/** Raw headers without those named in `lower` (lower-case names). */
export function withoutHeaders(raw: RawHeaders, lower: readonly string[]): RawHeaders {
  const out: RawHeaders = [];
  for (let i = 0; i + 1 < raw.length; i += 2) if (!lower.some((n) => sameName(raw[i]!, n))) out.push(raw[i]!, raw[i + 1]!);
  return out;
}

/** Headers that describe one connection hop and must not be forwarded (RFC 9110 7.6.1), and Host. */
export const HOP_HEADERS: ReadonlySet<string> = new Set([
  'connection',
  'keep-alive',
  'proxy-connection',
  'proxy-authenticate',
  'proxy-authorization',
  'te',
  'trailer',
  'transfer-encoding',
  'upgrade',
  'host',
]);
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
      if (lower === 'connection')
        listed = raw[i + 1]!.toLowerCase()
          .split(',')
          .map((x) => x.trim());
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

/** Go's canonical header form ("x-my-header" -> "X-My-Header"), as Fn and the FDKs write header names. */
export function canonical(name: string): string {
  return name.toLowerCase().replace(/(^|-)([a-z])/g, (_m, sep: string, c: string) => sep + c.toUpperCase());
}

/** Raw headers as a map of canonical names to value lists (the JSON formats' `headers`). */
export function headerLists(raw: RawHeaders): Record<string, string[]> {
  const out: Record<string, string[]> = {};
  for (let i = 0; i + 1 < raw.length; i += 2) {
    const name = canonical(raw[i]!);
    (out[name] ??= []).push(raw[i + 1]!);
  }
  return out;
}
