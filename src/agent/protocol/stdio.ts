/**
 * The hot stdin/stdout formats of the 2018 FDKs. One container serves many
 * calls over its stdin and stdout, one at a time:
 *
 *   http        an HTTP/1.1 request written to stdin (the caller's method,
 *               path and headers, plus Fn_deadline, Fn_request_url,
 *               Fn_call_id, Fn_method, and Content-Length); the answer is an
 *               HTTP/1.1 response read from stdout
 *   json        one JSON object per call on stdin: call_id, content_type,
 *               deadline, body (a string), protocol {type, method,
 *               request_url, headers}; the answer is one JSON object on
 *               stdout: body, content_type, protocol {status_code, headers}
 *   cloudevent  as json, the call wrapped as a CloudEvent (eventID = call id,
 *               contentType, data = body, extensions {deadline, protocol});
 *               the answer is the event with its data changed
 *
 * The answers are the caller's answers (no Fn-Http-* mapping). A stream in
 * an unknown state (a timed-out call, output nobody asked for) must not reach
 * the next call: the container is then retired.
 */
import { Duplex, type Readable, type Writable } from 'node:stream';
import { StringDecoder } from 'node:string_decoder';
import { E, FunctionError } from '../../models/index.js';
import { bodyFraming, headerLists, rfc3339, wholeBody, type CallRequest, type CallResponse, type Exchange, type ExchangeOptions, type RawHeaders } from './call.js';
import { ContainerConnection, httpExchange, requestHead } from './http1.js';

/** stdin and stdout of a container as one duplex stream, for HTTP framing. */
class StdioDuplex extends Duplex {
  constructor(
    private readonly stdin: Writable,
    private readonly stdout: Readable,
  ) {
    super();
    stdout.on('data', (chunk: Buffer) => {
      if (!this.push(chunk)) stdout.pause();
    });
    stdout.once('end', () => this.push(null));
    stdin.once('error', (err) => this.destroy(err));
  }

  override _read(): void {
    this.stdout.resume();
  }

  override _write(chunk: Buffer, encoding: BufferEncoding, done: (err?: Error | null) => void): void {
    this.stdin.write(chunk, encoding, done);
  }
}

/** A connection over the container's stdio: there is only one; once broken it stays broken. */
export function stdioConnection(stdin: Writable, stdout: Readable): ContainerConnection {
  const duplex = new StdioDuplex(stdin, stdout);
  return new ContainerConnection(() => {
    if (duplex.destroyed) throw new FunctionError(E.FunctionResponse, { message: "the container's stdio stream is closed" });
    return duplex;
  });
}

/** The `http` format: the caller's request, with Fn's extra headers, as HTTP/1.1 on stdin. */
export function stdioHttpExchange(conn: ContainerConnection, req: CallRequest, opts: ExchangeOptions): Exchange {
  const url = new URL(req.call.url);
  const headers = req.call.headers.concat('Fn_deadline', rfc3339(opts.deadline), 'Fn_request_url', req.call.url, 'Fn_call_id', req.call.id, 'Fn_method', req.call.method);
  const x = httpExchange(conn, requestHead(req.call.method, url.pathname + url.search, headers, bodyFraming(req), url.host), req.body, opts.responseLimit);
  return { response: x.response, cancel: x.cancel };
}

/** Where `search` is in `text` from `from` on, or text.length. */
function indexOrEnd(text: string, search: string, from: number): number {
  const at = text.indexOf(search, from);
  return at < 0 ? text.length : at;
}

/**
 * Splits a byte stream into top-level JSON objects: braces counted outside
 * strings, escapes honoured. Whitespace between objects is skipped;
 * anything else is a protocol error, and the splitter stays failed.
 *
 * Each chunk is scanned on its own (the state carries over) and an object
 * is joined once, when it is complete: appended to one string instead, the
 * text was copied whole at every chunk (a 65 MiB answer took seconds).
 */
export class JsonObjectSplitter {
  /** The object in progress: its text so far, a piece per chunk. */
  private parts: string[] = [];
  private partsLength = 0;
  private inObject = false;
  private depth = 0;
  private inString = false;
  private escaped = false;
  private failed: FunctionError | undefined;
  private readonly decoder = new StringDecoder('utf8');

  /** Appends bytes and returns every object completed by them, as text. */
  push(chunk: Buffer): string[] {
    if (this.failed) throw this.failed;
    // A character cut between two chunks is held until its last byte comes (toString per chunk garbled it).
    const text = this.decoder.write(chunk);
    const out: string[] = [];
    let { inObject, depth, inString, escaped } = this;
    /** Where the object in progress begins in `text` (0: in an earlier chunk). */
    let from = 0;
    /** The next quote and backslash at or after where they were last looked for (text.length: none). */
    let quote = -1;
    let backslash = -1;
    for (let i = 0; i < text.length; i++) {
      if (inString) {
        if (escaped) {
          escaped = false;
          continue;
        }
        // Strings (the body) are most of an answer: jumped through to their next quote or backslash.
        if (quote < i) quote = indexOrEnd(text, '"', i);
        if (backslash < i) backslash = indexOrEnd(text, '\\', i);
        i = Math.min(quote, backslash);
        if (i === text.length) break;
        if (i === backslash) escaped = true;
        else inString = false;
        continue;
      }
      const c = text.charCodeAt(i);
      if (!inObject) {
        if (c === 0x20 || c === 0x0a || c === 0x0d || c === 0x09) continue;
        if (c !== 0x7b) throw (this.failed = new FunctionError(E.FunctionInvalidResponse, { message: 'invalid function response: expected a JSON object on stdout' }));
        inObject = true;
        depth = 1;
        from = i;
      } else if (c === 0x22) inString = true;
      else if (c === 0x7b || c === 0x5b) depth++;
      else if ((c === 0x7d || c === 0x5d) && --depth === 0) {
        this.parts.push(text.slice(from, i + 1));
        out.push(this.parts.join(''));
        this.parts = [];
        this.partsLength = 0;
        inObject = false;
      }
    }
    this.inObject = inObject;
    this.depth = depth;
    this.inString = inString;
    this.escaped = escaped;
    if (inObject) {
      const rest = text.slice(from);
      this.parts.push(rest);
      this.partsLength += rest.length;
    }
    return out;
  }

  /** Characters of an object not yet complete (only whitespace is left between objects: anything else fails the push). */
  get pending(): number {
    return this.partsLength;
  }
}

/**
 * One JSON object per call over stdin/stdout. An answer with more output
 * after it, or a call abandoned midway, spends the channel: `spent` tells
 * the container to leave service after this call.
 */
export class JsonChannel {
  private readonly splitter = new JsonObjectSplitter();
  private waiting: { resolve: (v: unknown) => void; reject: (e: unknown) => void; max: number } | undefined;
  private broken: unknown;
  spent = false;

  constructor(
    private readonly stdin: Writable,
    stdout: Readable,
  ) {
    stdout.on('data', (chunk: Buffer) => this.onData(chunk));
    stdout.once('end', () => this.fail(new FunctionError(E.FunctionResponse, { message: 'the function closed its stdout' })));
    stdin.once('error', (err) => this.fail(new FunctionError(E.FunctionResponse, { cause: err })));
  }

  private onData(chunk: Buffer): void {
    let objects: string[];
    try {
      objects = this.splitter.push(chunk);
    } catch (err) {
      this.fail(err);
      return;
    }
    for (const text of objects) {
      const w = this.waiting;
      if (!w) {
        this.spent = true; // output nobody asked for
        continue;
      }
      this.waiting = undefined;
      if (this.splitter.pending > 0) this.spent = true;
      // An answer that arrived whole is held to the limit too (a partial one is checked below).
      if (text.length * 3 > w.max && Buffer.byteLength(text) > w.max) {
        w.reject(new FunctionError(E.FunctionResponseTooBig));
        continue;
      }
      try {
        w.resolve(JSON.parse(text));
      } catch (err) {
        w.reject(new FunctionError(E.FunctionInvalidResponse, { message: `invalid function response: ${(err as Error).message}` }));
      }
    }
    const w = this.waiting;
    if (w && this.splitter.pending > w.max) this.fail(new FunctionError(E.FunctionResponseTooBig));
  }

  private fail(err: unknown): void {
    this.broken ??= err;
    this.spent = true;
    const w = this.waiting;
    this.waiting = undefined;
    w?.reject(err);
  }

  /** Writes one object and resolves with the next object the function writes. */
  request(message: unknown, limit: number): Promise<unknown> {
    if (this.broken) return Promise.reject(this.broken);
    if (this.waiting) return Promise.reject(new FunctionError(E.FunctionResponse, { message: 'a call is already in progress' }));
    return new Promise((resolve, reject) => {
      this.waiting = { resolve, reject, max: limit };
      this.stdin.write(`${JSON.stringify(message)}\n`);
    });
  }

  /** Abandons the call in progress: its answer may still come, so the channel is spent. */
  abandon(reason: unknown): void {
    this.fail(reason);
  }
}

/** The request body as one string, read whole (the JSON formats carry it inside the message). */
async function bodyText(req: CallRequest): Promise<string> {
  return (await wholeBody(req.body)).toString('utf8');
}

function contentTypeOf(headers: RawHeaders): string {
  for (let i = 0; i + 1 < headers.length; i += 2) if (headers[i]!.toLowerCase() === 'content-type') return headers[i + 1]!;
  return '';
}

interface ProtocolOut {
  status_code?: unknown;
  headers?: unknown;
}

/** Turns a JSON-format answer into the caller's answer. */
function answerFrom(body: unknown, contentType: unknown, protocol: ProtocolOut | undefined): CallResponse {
  const bytes = Buffer.from(typeof body === 'string' ? body : body === undefined || body === null ? '' : JSON.stringify(body), 'utf8');
  const headers: RawHeaders = [];
  if (protocol && typeof protocol.headers === 'object' && protocol.headers !== null) {
    for (const [name, values] of Object.entries(protocol.headers as Record<string, unknown>)) {
      for (const v of Array.isArray(values) ? values : [values]) if (typeof v === 'string' && name.toLowerCase() !== 'content-length') headers.push(name, v);
    }
  }
  headers.push('Content-Type', typeof contentType === 'string' && contentType !== '' ? contentType : 'application/json');
  const code = Number(protocol?.status_code);
  return { status: Number.isInteger(code) && code >= 100 && code <= 599 ? code : 200, headers, body: bytes };
}

function jsonFormatExchange(channel: JsonChannel, req: CallRequest, opts: ExchangeOptions, build: (body: string) => unknown, read: (answer: unknown) => CallResponse): Exchange {
  const response = (async () => {
    const body = await bodyText(req);
    const answer = await channel.request(build(body), opts.responseLimit);
    if (typeof answer !== 'object' || answer === null) throw new FunctionError(E.FunctionInvalidResponse);
    return read(answer);
  })();
  return { response, cancel: (reason) => channel.abandon(reason) };
}

function protocolIn(req: CallRequest): Record<string, unknown> {
  return { type: 'http', method: req.call.method, request_url: req.call.url, headers: headerLists(req.call.headers) };
}

/** The `json` format. */
export function jsonExchange(channel: JsonChannel, req: CallRequest, opts: ExchangeOptions): Exchange {
  return jsonFormatExchange(
    channel,
    req,
    opts,
    (body) => ({ call_id: req.call.id, content_type: contentTypeOf(req.call.headers), deadline: rfc3339(opts.deadline), body, protocol: protocolIn(req) }),
    (answer) => {
      const a = answer as { body?: unknown; content_type?: unknown; protocol?: ProtocolOut };
      return answerFrom(a.body, a.content_type, a.protocol);
    },
  );
}

/** The `cloudevent` format (CloudEvents 0.1, as Fn used them). */
export function cloudEventExchange(channel: JsonChannel, req: CallRequest, opts: ExchangeOptions): Exchange {
  return jsonFormatExchange(
    channel,
    req,
    opts,
    (body) => {
      const contentType = contentTypeOf(req.call.headers);
      let data: unknown = body;
      if (/json/i.test(contentType) && body !== '') {
        try {
          data = JSON.parse(body);
        } catch {
          data = body;
        }
      }
      return {
        cloudEventsVersion: '0.1',
        eventID: req.call.id,
        source: req.call.url,
        eventType: 'io.fnproject.httprequest',
        eventTime: new Date().toISOString(),
        contentType,
        data,
        extensions: { deadline: rfc3339(opts.deadline), protocol: protocolIn(req) },
      };
    },
    (answer) => {
      const ev = answer as { data?: unknown; contentType?: unknown; extensions?: { protocol?: ProtocolOut } };
      return answerFrom(ev.data, ev.contentType, ev.extensions?.protocol);
    },
  );
}
