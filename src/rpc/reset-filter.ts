/**
 * Keeps a gRPC client that never half-closes its streams from using up the
 * runner's HTTP/2 connection.
 *
 * Fn's LB (grpc-go) sends each call's last DataFrame but never ends its side
 * of the Engage stream; when the runner ends the call (trailers with
 * END_STREAM), grpc-go answers with RST_STREAM(NO_ERROR): "done, and I send
 * nothing more". Node 20's nghttp2 counts every RST_STREAM it receives
 * (1000, then 33 a second; Node 20 cannot change either) and, once they run
 * out, sends GOAWAY: at a few hundred calls a second within seconds. And
 * grpc-go (Fn 0.3.753's, 1.20) fails a stream it opened while reading any
 * GOAWAY, graceful or not, which Fn's LB answers 500.
 *
 * So a connection from such a client goes through a filter on its way in:
 * an RST_STREAM(NO_ERROR) for a stream whose answer the runner has already
 * ended, and whose client side is still open, is handed to nghttp2 as what
 * it means there, the client's end of the stream (an empty DATA frame with
 * END_STREAM). The stream closes as one whose both sides ended, and no
 * reset is counted. Every other frame passes unchanged, every other reset
 * included: a reset of a stream the runner is still serving (what the
 * "rapid reset" attack sends) reaches nghttp2 and its limit as before.
 *
 *   TCP or TLS ──sniff the client's SETTINGS──▶ fnts LB (FNTS_CLIENT_SETTING): straight to nghttp2
 *                                          └──▶ any other client: ResetFilter ──▶ nghttp2
 *
 * fnts's LB half-closes every stream with its request, so its resets are
 * rare (a caller that left); it marks its connections with a setting of its
 * own in its first SETTINGS frame (unknown settings are ignored, RFC 9113
 * 6.5.2), and they skip the filter, which costs a JS pass over every
 * inbound byte (about 25 us of CPU per call, measured).
 */
import { Duplex } from 'node:stream';
import type { ServerHttp2Stream } from 'node:http2';
import type { Socket } from 'node:net';
import { FNTS_CLIENT_SETTING } from './wire.js';

const PREFACE = Buffer.from('PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n', 'latin1');
const FRAME_HEADER = 9;
const TYPE_DATA = 0x0;
const TYPE_RST_STREAM = 0x3;
const TYPE_SETTINGS = 0x4;
const FLAG_END_STREAM = 0x1;
const NO_ERROR = 0;
/** A client's preface and first SETTINGS frame come at once; one that sends less for this long is cut. */
const SNIFF_TIMEOUT_MS = 10_000;
/** More than a preface and a SETTINGS frame can hold (RFC 9113 allows 16 KiB frames; clients send a few dozen bytes). */
const SNIFF_MAX_BYTES = PREFACE.length + FRAME_HEADER + 16 * 1024;

/** Where a connection goes once its client is known. */
export type SniffResult = { readonly kind: 'fnts'; readonly head: Buffer } | { readonly kind: 'other'; readonly head: Buffer };

/**
 * Reads a connection's first bytes until its client's first SETTINGS frame
 * is whole, and says whether it is fnts's LB (its SETTINGS carry
 * FNTS_CLIENT_SETTING = 1). Bytes that are not an HTTP/2 client preface
 * count as another client (nghttp2 refuses them). The bytes read are
 * handed back with the answer; the socket is left paused.
 */
export function sniffClient(socket: Socket, decide: (result: SniffResult | undefined) => void): void {
  const chunks: Buffer[] = [];
  let size = 0;
  const timer = setTimeout(() => finish(undefined), SNIFF_TIMEOUT_MS);
  timer.unref();
  const onData = (chunk: Buffer): void => {
    chunks.push(chunk);
    size += chunk.length;
    const head = chunks.length === 1 ? chunks[0]! : Buffer.concat(chunks, size);
    const fnts = isFntsClient(head);
    if (fnts !== undefined) finish({ kind: fnts ? 'fnts' : 'other', head });
  };
  const onGone = (): void => finish(undefined);
  function finish(result: SniffResult | undefined): void {
    clearTimeout(timer);
    socket.off('data', onData);
    socket.off('close', onGone);
    socket.off('end', onGone);
    socket.pause();
    if (!result) socket.destroy();
    decide(result);
  }
  socket.on('data', onData);
  socket.once('close', onGone);
  socket.once('end', onGone);
}

/** True/false once `head` holds the preface and the first SETTINGS frame (or is not HTTP/2); undefined while it needs more. */
function isFntsClient(head: Buffer): boolean | undefined {
  const preface = Math.min(head.length, PREFACE.length);
  if (!head.subarray(0, preface).equals(PREFACE.subarray(0, preface))) return false;
  if (head.length < PREFACE.length + FRAME_HEADER) return head.length >= SNIFF_MAX_BYTES ? false : undefined;
  const at = PREFACE.length;
  const length = head.readUIntBE(at, 3);
  if (head[at + 3] !== TYPE_SETTINGS) return false;
  if (head.length < at + FRAME_HEADER + length) return head.length >= SNIFF_MAX_BYTES ? false : undefined;
  for (let p = at + FRAME_HEADER; p + 6 <= at + FRAME_HEADER + length; p += 6) {
    if (head.readUInt16BE(p) === FNTS_CLIENT_SETTING && head.readUInt32BE(p + 2) === 1) return true;
  }
  return false;
}

/**
 * A connection seen through the filter (see the top of this file): what
 * the client sends is parsed into frames and passed on, each
 * RST_STREAM(NO_ERROR) of a stream `answered` says is over on the runner's
 * side rewritten as the client's end of it; what the runner sends goes
 * straight to the socket.
 */
export class ResetFilter extends Duplex {
  /** The connection's streams, by id, for the rewrite's check. */
  private readonly streams = new Map<number, ServerHttp2Stream>();
  /** Inbound bytes held back: a frame header not whole yet, or a reset not whole yet (at most 12 bytes). */
  private pending: Buffer = Buffer.alloc(0);
  /** Payload bytes of the frame being passed on that have not arrived yet. */
  private passing = 0;
  private prefaceLeft = PREFACE.length;
  /** Resets rewritten since the connection opened (kept for tests and logs). */
  rewritten = 0;
  private resetListener: (() => void) | undefined;

  constructor(private readonly socket: Socket) {
    super({ allowHalfOpen: false });
    socket.on('data', (chunk: Buffer) => {
      if (!this.push(this.pass(chunk))) socket.pause();
    });
    socket.on('end', () => this.push(null));
    socket.on('close', () => this.destroy());
    socket.on('error', (err) => this.destroy(err));
  }

  /** Bytes that came before the filter was in place (the sniffed head), filtered as any others. */
  feed(head: Buffer): void {
    if (head.length > 0) this.push(this.pass(head));
    this.socket.resume();
  }

  /** Told of each reset that reaches nghttp2 (one it counts). Must be cheap and must not throw. */
  onReset(listener: () => void): void {
    this.resetListener = listener;
  }

  /** Registers a stream of this connection; forgotten when it closes. */
  watch(stream: ServerHttp2Stream): void {
    const id = stream.id;
    if (id === undefined) return;
    this.streams.set(id, stream);
    stream.once('close', () => this.streams.delete(id));
  }

  override _read(): void {
    this.socket.resume();
  }

  override _write(chunk: Buffer, _encoding: BufferEncoding, done: (err?: Error | null) => void): void {
    this.socket.write(chunk, done);
  }

  override _final(done: (err?: Error | null) => void): void {
    this.socket.end(done);
  }

  override _destroy(err: Error | null, done: (err?: Error | null) => void): void {
    this.socket.destroy();
    done(err);
  }

  /**
   * `chunk` passed on as it comes, resets rewritten where they mean the
   * client's end. Only an RST_STREAM frame is held until it is whole (13
   * bytes); any other frame's bytes go on at once, however long its header
   * says it is, so that nghttp2 judges every header as soon as it arrives
   * (a frame above its SETTINGS_MAX_FRAME_SIZE ends the connection) and
   * nothing a client claims makes the filter hold more than a few bytes.
   */
  private pass(chunk: Buffer): Buffer {
    let data = this.pending.length > 0 ? Buffer.concat([this.pending, chunk]) : chunk;
    let at = 0;
    if (this.prefaceLeft > 0) {
      const n = Math.min(this.prefaceLeft, data.length);
      this.prefaceLeft -= n;
      at = n;
    }
    const out: Buffer[] = [];
    let from = 0;
    while (this.prefaceLeft === 0 && at < data.length) {
      if (this.passing > 0) {
        const n = Math.min(this.passing, data.length - at);
        this.passing -= n;
        at += n;
        continue;
      }
      if (at + FRAME_HEADER > data.length) break;
      const length = data.readUIntBE(at, 3);
      if (data[at + 3] === TYPE_RST_STREAM) {
        // A well-formed reset is 4 bytes of error code; any other length nghttp2 refuses as it comes.
        if (length === 4) {
          const end = at + FRAME_HEADER + 4;
          if (end > data.length) break;
          const id = data.readUInt32BE(at + 5) & 0x7fffffff;
          if (data.readUInt32BE(at + FRAME_HEADER) === NO_ERROR && this.clientEnds(id)) {
            out.push(data.subarray(from, at), endOfStream(id));
            from = end;
            this.rewritten++;
          } else this.resetListener?.();
          at = end;
          continue;
        }
        this.resetListener?.();
      }
      at += FRAME_HEADER;
      this.passing = length;
    }
    out.push(data.subarray(from, at));
    this.pending = at < data.length ? Buffer.from(data.subarray(at)) : Buffer.alloc(0);
    data = out.length === 1 ? out[0]! : Buffer.concat(out);
    return data;
  }

  /** True when a reset of `id` only says the client is done: the runner has ended the stream and the client had not. */
  private clientEnds(id: number): boolean {
    const stream = this.streams.get(id);
    return stream !== undefined && stream.writableEnded && !stream.readableEnded;
  }
}

/** An empty DATA frame that ends stream `id`. */
function endOfStream(id: number): Buffer {
  const frame = Buffer.alloc(FRAME_HEADER);
  frame.writeUIntBE(0, 0, 3);
  frame[3] = TYPE_DATA;
  frame[4] = FLAG_END_STREAM;
  frame.writeUInt32BE(id & 0x7fffffff, 5);
  return frame;
}
