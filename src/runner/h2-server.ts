/**
 * The runner's side of gRPC, on node:http2 directly: a server of unary and
 * bidi-streaming methods with gRPC's framing, status and trailers (as
 * https://github.com/grpc/grpc/blob/master/doc/PROTOCOL-HTTP2.md specifies
 * them), for the runner protocol's few methods.
 *
 * Why not grpc-js's server: it writes each message of a stream in its own
 * syscall, waiting for the previous write to complete, so a call's answer
 * (CallResultStart, its DataFrames, CallFinished) reached the LB in three
 * writes and woke it three times. Here a handler writes what it has in one
 * buffer, and the LB reads a whole answer at once.
 *
 * What the server guarantees a handler: every stream has an error listener
 * (a reset or broken connection never throws), `end` and `fail` are
 * idempotent and safe after the stream closed, and a client's deadline
 * (grpc-timeout) cancels the call.
 */
import { constants as h2, createSecureServer, createServer, type Http2Server, type Http2Session, type IncomingHttpHeaders, type SecureServerOptions, type ServerHttp2Stream } from 'node:http2';
import type { AddressInfo, Socket } from 'node:net';
import { SessionRecycler, type RecycleOptions } from './recycle.js';
import { encodeGrpcMessage, GrpcStatus, MessageReader, parseGrpcTimeout } from './wire.js';

export interface ServerTls {
  readonly ca: Buffer;
  readonly key: Buffer;
  readonly cert: Buffer;
}

/** The response headers of every gRPC answer. */
const GRPC_HEADERS = { [h2.HTTP2_HEADER_STATUS]: 200, [h2.HTTP2_HEADER_CONTENT_TYPE]: 'application/grpc' };

/** Answers a call with its status alone (gRPC's Trailers-Only), nothing else having been sent on `stream`. */
function trailersOnly(stream: ServerHttp2Stream, code: number, details: string, extra: Record<string, string> = {}): void {
  safely(() => stream.respond({ ...GRPC_HEADERS, 'grpc-status': String(code), 'grpc-message': encodeGrpcMessage(details), ...extra }, { endStream: true }));
}

/**
 * Runs a write to a stream that Node may refuse with a throw (it was reset
 * or its connection broke in the meantime): the call is over then, and the
 * stream's close has told its handler so.
 */
function safely(write: () => void): void {
  try {
    write();
  } catch {
    // ERR_HTTP2_INVALID_STREAM and the like: nothing left to answer on.
  }
}

/**
 * One call to a method: the request's messages are read with `receive`
 * (the bytes of each, unframed), the answer goes out with `respond`,
 * `write`, `end` or `fail`.
 */
export class GrpcServerCall {
  private responded = false;
  private ended = false;
  private isCancelled = false;
  private cancelListeners: Array<() => void> = [];
  private trailers: Record<string, string> = {};
  private deadline: NodeJS.Timeout | undefined;

  constructor(
    readonly stream: ServerHttp2Stream,
    /** The request's headers: the call's metadata (traceparent, ...). */
    readonly metadata: IncomingHttpHeaders,
    private readonly maxMessageBytes: number,
  ) {
    // A reset by the client, or a connection that broke: the call is cancelled.
    stream.on('error', () => undefined);
    stream.once('close', () => {
      clearTimeout(this.deadline);
      if (!this.ended) this.cancel();
    });
    const timeoutMs = parseGrpcTimeout(metadata['grpc-timeout']);
    if (timeoutMs !== undefined) {
      this.deadline = setTimeout(() => {
        this.cancel();
        this.fail(GrpcStatus.DEADLINE_EXCEEDED, 'Deadline exceeded');
      }, timeoutMs);
      this.deadline.unref();
    }
  }

  /**
   * Reads the request: each message's bytes (unframed) to `onMessage`, then
   * `onEnd` when the client has sent all (a half-close). A message too big
   * or cut short fails the call. Call it at once in the handler.
   */
  receive(onMessage: (bytes: Buffer) => void, onEnd: () => void = () => undefined): void {
    const reader = new MessageReader(this.maxMessageBytes);
    this.stream.on('data', (chunk: Buffer) => {
      if (this.ended) return;
      let messages: Buffer[];
      try {
        messages = reader.push(chunk);
      } catch (err) {
        this.fail(GrpcStatus.RESOURCE_EXHAUSTED, err instanceof Error ? err.message : String(err));
        return;
      }
      for (const m of messages) if (!this.ended) this.guarded(() => onMessage(m));
    });
    this.stream.once('end', () => {
      if (reader.partial > 0) this.fail(GrpcStatus.INTERNAL, 'the request ended inside a message');
      else this.guarded(onEnd);
    });
  }

  /** True once the client cancelled, the stream broke, or the deadline passed. */
  get cancelled(): boolean {
    return this.isCancelled;
  }

  /** Runs `fn` once when the call is cancelled (at once if it already was). */
  onCancel(fn: () => void): void {
    if (this.isCancelled) fn();
    else this.cancelListeners.push(fn);
  }

  /** True while the answer can still be written (not ended by us, not reset or broken). */
  get open(): boolean {
    return !this.ended && !this.stream.closed && !this.stream.destroyed;
  }

  /** Sends the response headers (once; `write` and `end` send them if not sent), with `extra` metadata. */
  respond(extra: Record<string, string> = {}): void {
    if (this.responded || !this.open) return;
    this.responded = true;
    this.stream.once('wantTrailers', () => {
      // The stream can be reset between asking for trailers and this: Node throws then.
      if (!this.stream.closed && !this.stream.destroyed) safely(() => this.stream.sendTrailers(this.trailers));
    });
    safely(() => this.stream.respond({ ...GRPC_HEADERS, ...extra }, { waitForTrailers: true }));
  }

  /** Writes framed messages; resolves once the stream takes more (undefined: it can now). */
  write(framed: Buffer): Promise<void> | undefined {
    if (!this.open) return undefined;
    this.respond();
    if (this.stream.write(framed)) return undefined;
    return new Promise<void>((resolve) => {
      const done = (): void => {
        this.stream.off('drain', done);
        this.stream.off('close', done);
        resolve();
      };
      this.stream.once('drain', done);
      this.stream.once('close', done);
    });
  }

  /** Ends the call with status OK; `last` (framed messages) goes in the same write; `trailers` are added to the status. */
  end(last?: Buffer, trailers: Record<string, string> = {}): void {
    if (!this.open) return;
    this.respond();
    this.ended = true;
    clearTimeout(this.deadline);
    this.trailers = { ...trailers, 'grpc-status': String(GrpcStatus.OK) };
    if (last) this.stream.end(last);
    else this.stream.end();
  }

  /** Ends the call with an error status (trailers-only when nothing was sent yet). */
  fail(code: number, details: string): void {
    if (!this.open) return;
    this.ended = true;
    clearTimeout(this.deadline);
    if (this.responded) {
      this.trailers = { 'grpc-status': String(code), 'grpc-message': encodeGrpcMessage(details) };
      this.stream.end();
    } else {
      this.responded = true;
      trailersOnly(this.stream, code, details);
    }
  }

  /** Runs a handler's listener: one that throws fails its call (INTERNAL) rather than the server. */
  private guarded(fn: () => void): void {
    try {
      fn();
    } catch (err) {
      this.fail(GrpcStatus.INTERNAL, err instanceof Error ? err.message : String(err));
    }
  }

  private cancel(): void {
    if (this.isCancelled) return;
    this.isCancelled = true;
    const listeners = this.cancelListeners;
    this.cancelListeners = [];
    for (const fn of listeners) fn();
  }
}

/** A method: called once per call, with the call to read from (`receive`, at once) and answer on. */
export type GrpcHandler = (call: GrpcServerCall) => void;

/** A unary method: the answer (framed) made from the request's one message, or a failure. */
export function unary(answer: (request: Buffer | undefined) => Buffer): GrpcHandler {
  return (call) => {
    let request: Buffer | undefined;
    call.receive(
      (bytes) => (request ??= bytes),
      () => call.end(answer(request)),
    );
  };
}

export interface GrpcServerOptions {
  /** Mutual TLS (clients must show a certificate the CA signed); plaintext when absent. */
  readonly tls?: ServerTls | undefined;
  /** The largest request message taken (RESOURCE_EXHAUSTED above it). */
  readonly maxMessageBytes: number;
  /** Told of the server's own errors after it listens (the connection's and streams' end only those). */
  readonly onError?: (err: Error) => void;
  /** Methods by path (`/Service/Method`); any other path answers UNIMPLEMENTED. */
  readonly methods: ReadonlyMap<string, GrpcHandler>;
  /** How each connection estimates its peer's resets (runner/recycle.ts); nghttp2's limits by default. */
  readonly recycle?: RecycleOptions;
}

export class GrpcH2Server {
  private readonly server: Http2Server;
  /** Each open connection, with its estimate of the resets its peer will send. */
  private readonly sessions = new Map<Http2Session, SessionRecycler>();
  private readonly sockets = new Set<Socket>();

  constructor(private readonly o: GrpcServerOptions) {
    // Room for a call's log in the trailers (FN_MAX_LOG_SIZE_BYTES, base64), and for many calls' frames at once.
    const base = { settings: { maxHeaderListSize: 64 * 1024 }, maxSendHeaderBlockLength: 8 * 1024 * 1024, maxSessionMemory: 64 };
    this.server = o.tls
      ? (createSecureServer({ ...base, ca: o.tls.ca, key: o.tls.key, cert: o.tls.cert, requestCert: true, rejectUnauthorized: true, ALPNProtocols: ['h2'] } satisfies SecureServerOptions) as unknown as Http2Server)
      : createServer(base);
    // The raw connections too: a destroyed session still waits for its socket's
    // writes to drain, which a peer that stopped reading never lets happen.
    this.server.on(o.tls ? 'secureConnection' : 'connection', (socket: Socket) => {
      this.sockets.add(socket);
      socket.once('close', () => this.sockets.delete(socket));
    });
    this.server.on('session', (session: Http2Session) => {
      this.sessions.set(session, new SessionRecycler(session, o.recycle));
      session.on('error', () => undefined);
      session.once('close', () => this.sessions.delete(session));
    });
    // A TLS handshake that failed (no or a bad client certificate) ends that connection only.
    this.server.on('tlsClientError', () => undefined);
    this.server.on('sessionError', () => undefined);
    this.server.on('stream', (stream, headers) => {
      if (stream.session) this.sessions.get(stream.session)?.watch(stream);
      try {
        this.route(stream, headers);
      } catch (err) {
        // A stream reset as it arrived: Node refuses to answer it.
        this.o.onError?.(err instanceof Error ? err : new Error(String(err)));
      }
    });
  }

  /** Binds `host:port` (0: any free port); answers with the port bound. The error says which variable sets it. */
  listen(host: string, port: number, variable = 'FN_GRPC_PORT'): Promise<number> {
    return new Promise((resolve, reject) => {
      const onError = (err: Error): void => reject(new Error(`could not listen for gRPC on ${host}:${port}: ${err.message}; set ${variable} to a free port`));
      this.server.once('error', onError);
      this.server.listen(port, host, () => {
        this.server.off('error', onError);
        // Later errors (too many open files on accept, ...) end no call in flight: told, not thrown.
        this.server.on('error', (err) => this.o.onError?.(err));
        resolve((this.server.address() as AddressInfo).port);
      });
    });
  }

  /**
   * Stops taking connections and retires each open one (runner/recycle.ts:
   * no stream a client already sent is refused); calls in flight get
   * `graceMs`, then their streams and connections are cut.
   */
  close(graceMs = 1000): Promise<void> {
    return new Promise<void>((resolve) => {
      if (!this.server.listening) {
        resolve();
        return;
      }
      const force = setTimeout(() => {
        for (const s of this.sessions.keys()) s.destroy();
        for (const socket of this.sockets) socket.destroy();
      }, graceMs);
      force.unref();
      this.server.close(() => {
        clearTimeout(force);
        resolve();
      });
      for (const recycler of this.sessions.values()) recycler.retire();
    });
  }

  private route(stream: ServerHttp2Stream, headers: IncomingHttpHeaders): void {
    stream.on('error', () => undefined);
    const path = headers[h2.HTTP2_HEADER_PATH];
    const method = typeof path === 'string' ? this.o.methods.get(path) : undefined;
    const type = String(headers[h2.HTTP2_HEADER_CONTENT_TYPE] ?? '');
    if (headers[h2.HTTP2_HEADER_METHOD] !== 'POST' || !type.startsWith('application/grpc')) {
      stream.respond({ [h2.HTTP2_HEADER_STATUS]: 415 }, { endStream: true });
      return;
    }
    if (!method) {
      trailersOnly(stream, GrpcStatus.UNIMPLEMENTED, `${String(path)} is not a method of this server`);
      return;
    }
    const encoding = headers['grpc-encoding'];
    if (encoding !== undefined && encoding !== 'identity') {
      trailersOnly(stream, GrpcStatus.UNIMPLEMENTED, `grpc-encoding ${String(encoding)} is not supported`, { 'grpc-accept-encoding': 'identity' });
      return;
    }
    const call = new GrpcServerCall(stream, headers, this.o.maxMessageBytes);
    try {
      method(call);
    } catch (err) {
      call.fail(GrpcStatus.INTERNAL, err instanceof Error ? err.message : String(err));
    }
  }
}
