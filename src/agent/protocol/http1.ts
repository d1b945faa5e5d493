/**
 * HTTP/1.1 framing between the agent and one function container: requests
 * written, responses parsed, over one kept-alive connection (a unix socket
 * for http-stream; any duplex for the stdio `http` format).
 *
 * This is the agent's own wire, on the hot path of every call: a request goes
 * out in one write, a response is parsed in place with no copies for small
 * bodies. It speaks only what the FDK contract needs: POST, Content-Length
 * or chunked bodies on both sides, `Connection: close`, 1xx interim answers
 * skipped; anything else the container sends is a protocol error, which
 * retires the container.
 */
import { connect, type Socket } from 'node:net';
import { Readable, type Duplex } from 'node:stream';
import { ApiError, E, FunctionError } from '../../models/index.js';
import { isFraming, sameName, withoutHopHeaders, type RawHeaders } from './call.js';

export interface ResponseHead {
  readonly status: number;
  readonly headers: RawHeaders;
}

/** Receives one response: its head, then body chunks, then the end (or an error). */
export interface ResponseSink {
  head(head: ResponseHead): void;
  /** Return false to pause the connection until resume() is called. */
  data(chunk: Buffer): boolean;
  end(): void;
  error(err: Error): void;
}

export class ProtocolError extends Error {
  override readonly name = 'ProtocolError';
}

const MAX_HEAD_BYTES = 64 * 1024;
const CRLF2 = Buffer.from('\r\n\r\n');
const CRLF = Buffer.from('\r\n');

type BodyMode = { kind: 'length'; left: number } | { kind: 'chunked' } | { kind: 'close' } | { kind: 'none' };

/**
 * Parses a stream of HTTP/1.1 responses. Feed it bytes with push(); it calls
 * the current sink. One response at a time (the FDK answers in order).
 */
export class ResponseParser {
  private buf: Buffer = Buffer.alloc(0);
  private state: 'head' | 'body' | 'chunk-size' | 'chunk-data' | 'chunk-crlf' | 'trailers' | 'idle' = 'idle';
  private body: BodyMode = { kind: 'none' };
  private chunkLeft = 0;
  private sink: ResponseSink | undefined;
  /** The last response asked to close the connection. */
  closeAfter = false;

  expect(sink: ResponseSink): void {
    this.sink = sink;
    this.state = 'head';
    this.closeAfter = false;
  }

  get busy(): boolean {
    return this.sink !== undefined;
  }

  /** Feeds bytes; returns false when the sink asked for backpressure. */
  push(data: Buffer): boolean {
    this.buf = this.buf.length === 0 ? data : Buffer.concat([this.buf, data]);
    let flowing = true;
    for (;;) {
      const sink = this.sink;
      if (!sink) {
        if (this.buf.length > 0) throw new ProtocolError('unexpected data from the function between calls');
        return flowing;
      }
      switch (this.state) {
        case 'head': {
          const end = this.buf.indexOf(CRLF2);
          if (end < 0) {
            if (this.buf.length > MAX_HEAD_BYTES) throw new ProtocolError('function response header too large');
            return flowing;
          }
          const head = this.parseHead(this.buf.toString('latin1', 0, end));
          this.buf = this.buf.subarray(end + 4);
          if (head.status < 200) continue; // 100 Continue and friends: wait for the real answer
          sink.head(head);
          if (this.body.kind === 'none') this.finish();
          else this.state = this.body.kind === 'chunked' ? 'chunk-size' : 'body';
          continue;
        }
        case 'body': {
          if (this.buf.length === 0) return flowing;
          if (this.body.kind === 'length') {
            const take = Math.min(this.body.left, this.buf.length);
            const chunk = this.buf.subarray(0, take);
            this.buf = this.buf.subarray(take);
            this.body.left -= take;
            flowing = sink.data(chunk) && flowing;
            if (this.body.left === 0) this.finish();
          } else {
            const chunk = this.buf;
            this.buf = Buffer.alloc(0);
            flowing = sink.data(chunk) && flowing;
          }
          continue;
        }
        case 'chunk-size': {
          const eol = this.buf.indexOf(CRLF);
          if (eol < 0) {
            if (this.buf.length > 1024) throw new ProtocolError('bad chunk size line from the function');
            return flowing;
          }
          const line = this.buf.toString('latin1', 0, eol).split(';', 1)[0]!.trim();
          if (!/^[0-9a-fA-F]{1,15}$/.test(line)) throw new ProtocolError('bad chunk size from the function');
          this.chunkLeft = parseInt(line, 16);
          this.buf = this.buf.subarray(eol + 2);
          this.state = this.chunkLeft === 0 ? 'trailers' : 'chunk-data';
          continue;
        }
        case 'chunk-data': {
          if (this.buf.length === 0) return flowing;
          const take = Math.min(this.chunkLeft, this.buf.length);
          const chunk = this.buf.subarray(0, take);
          this.buf = this.buf.subarray(take);
          this.chunkLeft -= take;
          flowing = sink.data(chunk) && flowing;
          if (this.chunkLeft === 0) this.state = 'chunk-crlf';
          continue;
        }
        case 'chunk-crlf': {
          if (this.buf.length < 2) return flowing;
          if (this.buf[0] !== 13 || this.buf[1] !== 10) throw new ProtocolError('bad chunk ending from the function');
          this.buf = this.buf.subarray(2);
          this.state = 'chunk-size';
          continue;
        }
        case 'trailers': {
          const eol = this.buf.indexOf(CRLF);
          if (eol < 0) {
            if (this.buf.length > MAX_HEAD_BYTES) throw new ProtocolError('function response trailers too large');
            return flowing;
          }
          this.buf = this.buf.subarray(eol + 2);
          if (eol === 0) this.finish(); // the empty line ends the trailers
          continue;
        }
        default:
          return flowing;
      }
    }
  }

  /** The connection closed: ends a close-delimited body, else fails the response in progress. */
  closed(): void {
    const sink = this.sink;
    if (!sink) return;
    if (this.state === 'body' && this.body.kind === 'close') {
      this.finish();
      return;
    }
    this.sink = undefined;
    sink.error(new ProtocolError('the function closed the connection before answering'));
  }

  private finish(): void {
    const sink = this.sink!;
    this.sink = undefined;
    this.state = 'idle';
    sink.end();
  }

  /**
   * Parses "HTTP/1.x NNN reason" and "Name: value" lines, noting the framing
   * headers on the way (hot path: no regex, no split, no header object).
   */
  private parseHead(text: string): ResponseHead {
    let eol = text.indexOf('\r\n');
    if (eol < 0) eol = text.length;
    const d0 = text.charCodeAt(9) - 48;
    const d1 = text.charCodeAt(10) - 48;
    const d2 = text.charCodeAt(11) - 48;
    if (eol < 12 || !text.startsWith('HTTP/1.') || text.charCodeAt(8) !== 32 || d0 < 1 || d0 > 5 || d1 < 0 || d1 > 9 || d2 < 0 || d2 > 9 || (eol > 12 && text.charCodeAt(12) !== 32)) {
      throw new ProtocolError(`bad status line from the function: ${JSON.stringify(text.slice(0, Math.min(eol, 80)))}`);
    }
    const status = d0 * 100 + d1 * 10 + d2;
    const headers: RawHeaders = [];
    let chunked = false;
    let length: number | undefined;
    let close = false;
    let pos = eol + 2;
    while (pos < text.length) {
      let end = text.indexOf('\r\n', pos);
      if (end < 0) end = text.length;
      const colon = text.indexOf(':', pos);
      if (colon <= pos || colon >= end) throw new ProtocolError('bad header line from the function');
      const name = text.slice(pos, colon);
      let vs = colon + 1;
      while (vs < end && (text.charCodeAt(vs) === 32 || text.charCodeAt(vs) === 9)) vs++;
      let ve = end;
      while (ve > vs && (text.charCodeAt(ve - 1) === 32 || text.charCodeAt(ve - 1) === 9)) ve--;
      const value = text.slice(vs, ve);
      headers.push(name, value);
      if (sameName(name, 'transfer-encoding')) chunked = value.toLowerCase().includes('chunked');
      else if (sameName(name, 'content-length')) {
        const n = Number(value);
        if (!Number.isSafeInteger(n) || n < 0 || value === '') throw new ProtocolError('bad content-length from the function');
        length = n;
      } else if (sameName(name, 'connection')) close = value.toLowerCase().includes('close');
      pos = end + 2;
    }
    this.closeAfter = close;
    if (status < 200 || status === 204 || status === 304) this.body = { kind: 'none' };
    else if (chunked) this.body = { kind: 'chunked' };
    else if (length !== undefined) this.body = length === 0 ? { kind: 'none' } : { kind: 'length', left: length };
    else {
      this.body = { kind: 'close' };
      this.closeAfter = true;
    }
    return { status, headers };
  }
}

/** Serialises a request head. Names or values with CR or LF are dropped (no header injection). */
export function requestHead(method: string, target: string, headers: RawHeaders, bodyLength: number | 'chunked', host = 'localhost'): string {
  let head = `${method} ${target} HTTP/1.1\r\nHost: ${host}\r\n`;
  for (let i = 0; i + 1 < headers.length; i += 2) {
    const name = headers[i]!;
    const value = headers[i + 1]!;
    if (isFraming(name.toLowerCase()) || /[\r\n:]/.test(name) || /[\r\n]/.test(value)) continue;
    head += `${name}: ${value}\r\n`;
  }
  head += bodyLength === 'chunked' ? 'Transfer-Encoding: chunked\r\n\r\n' : `Content-Length: ${bodyLength}\r\n\r\n`;
  return head;
}

/**
 * One kept-alive HTTP/1.1 connection to a container, one request at a time.
 * Reconnects when the previous exchange closed or broke the connection.
 */
export class ContainerConnection {
  private socket: Duplex | undefined;
  private parser = new ResponseParser();

  constructor(private readonly open: () => Duplex) {}

  static unix(path: string): ContainerConnection {
    return new ContainerConnection(() => {
      const s: Socket = connect(path);
      s.setNoDelay(true);
      return s;
    });
  }

  /** The live connection, or a new one with its own parser. */
  private ensure(): Duplex {
    if (this.socket && !this.socket.destroyed) return this.socket;
    const socket = this.open();
    const parser = new ResponseParser();
    socket.on('data', (chunk: Buffer) => {
      try {
        if (!parser.push(chunk)) socket.pause();
      } catch (err) {
        socket.destroy(err as Error);
      }
    });
    // Whatever ends the connection fails the response in progress, if any.
    socket.on('error', () => parser.closed());
    socket.on('end', () => parser.closed());
    socket.on('close', () => {
      if (this.socket === socket) this.socket = undefined;
      parser.closed();
    });
    this.socket = socket;
    this.parser = parser;
    return socket;
  }

  /**
   * Sends one request (`body` a Buffer, a stream, or null) and delivers the
   * response to `sink`, exactly one of end() or error(). The returned
   * function resumes a connection the sink paused.
   */
  send(head: string, body: Buffer | Readable | null, sink: ResponseSink): () => void {
    const socket = this.ensure();
    // A kept-alive connection may still be paused by the previous answer's
    // reader (its last chunk filled the stream just before it ended, and an
    // ended stream asks for no more): this answer must flow.
    socket.resume();
    const parser = this.parser;
    let settled = false;
    parser.expect({
      head: (h) => sink.head(h),
      data: (c) => sink.data(c),
      end: () => {
        if (settled) return;
        settled = true;
        if (parser.closeAfter) socket.end();
        sink.end();
      },
      error: (e) => {
        if (settled) return;
        settled = true;
        sink.error(e);
      },
    });
    if (body === null) {
      socket.write(head, 'latin1');
    } else if (Buffer.isBuffer(body)) {
      // Small bodies travel in the same write as the head.
      if (body.length <= 64 * 1024) socket.write(Buffer.concat([Buffer.from(head, 'latin1'), body]));
      else {
        socket.write(head, 'latin1');
        socket.write(body);
      }
    } else if (body.errored || body.destroyed) {
      // The body failed before it could be sent (e.g. it outgrew its limit while waiting).
      settled = true;
      queueMicrotask(() => sink.error((body.errored as Error | null) ?? new ProtocolError('request body was destroyed')));
    } else {
      socket.write(head, 'latin1');
      const chunked = head.endsWith('Transfer-Encoding: chunked\r\n\r\n');
      body.on('data', (chunk: Buffer) => {
        let ok: boolean;
        if (chunked) {
          // Every part of the frame is written, whatever the buffer says: a
          // short-circuited write would corrupt the framing.
          socket.cork();
          socket.write(`${chunk.length.toString(16)}\r\n`, 'latin1');
          socket.write(chunk);
          ok = socket.write('\r\n', 'latin1');
          socket.uncork();
        } else ok = socket.write(chunk);
        if (!ok) {
          body.pause();
          socket.once('drain', () => body.resume());
        }
      });
      body.once('end', () => {
        if (chunked) socket.write('0\r\n\r\n');
      });
      body.once('error', (err) => {
        // The request cannot be completed, so neither can this connection.
        if (!settled) {
          settled = true;
          sink.error(err);
        }
        socket.destroy();
      });
    }
    return () => socket.resume();
  }

  /** Drops the connection (an aborted or timed-out call leaves it in an unknown state). */
  destroy(): void {
    this.socket?.destroy();
    this.socket = undefined;
  }
}

/** Bodies up to this size are read whole before answering (Fn buffers every answer). */
const STREAM_AFTER_BYTES = 1024 * 1024;

/** An HTTP answer as read from the container, before any format maps it. */
export interface HttpAnswer {
  readonly status: number;
  /** Hop-by-hop headers and Content-Length removed. */
  readonly headers: RawHeaders;
  /** A Buffer when the whole body was read; else a stream of it. */
  readonly body: Buffer | Readable;
}

/**
 * Sends one request over `conn` and reads the answer. Rejects with
 * FunctionError `FunctionResponseTooBig` for an oversized body,
 * `FunctionResponse` when the container does not answer properly, or the
 * reason given to cancel(). A body over the buffering limit is streamed; a
 * stream that outgrows `limit` (Infinity: none) is cut.
 */
export function httpExchange(conn: ContainerConnection, head: string, body: Buffer | Readable | null, limit: number): { response: Promise<HttpAnswer>; cancel(reason: unknown): void } {
  const max = limit;
  const bufferLimit = Math.min(max, STREAM_AFTER_BYTES);
  let cancel: (reason: unknown) => void = () => undefined;
  const response = new Promise<HttpAnswer>((resolve, reject) => {
    let answer: { status: number; headers: RawHeaders } | undefined;
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

    const resume = conn.send(head, body, {
      head: (h) => {
        answer = { status: h.status, headers: withoutHopHeaders(h.headers, 'content-length') };
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
          resolve({ status: answer!.status, headers: answer!.headers, body: stream });
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
        resolve({ status: answer!.status, headers: answer!.headers, body: chunks.length === 1 ? chunks[0]! : Buffer.concat(chunks, size) });
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
