/**
 * The server side of the fleet's gRPC, on node:http2 directly: a server of unary and
 * bidi-streaming methods with gRPC's framing, status and trailers (as
 * https://github.com/grpc/grpc/blob/master/doc/PROTOCOL-HTTP2.md specifies
 * them), for the fleet's methods: the runner protocol's and the pool
 * manager's.
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
import { constants as h2, createServer, type Http2Server, type Http2Session, type IncomingHttpHeaders, type ServerHttp2Stream } from 'node:http2';
import { createServer as createNetServer, type AddressInfo, type Server as NetServer, type Socket } from 'node:net';
import { createServer as createTlsServer, type TLSSocket } from 'node:tls';
import { ResetFilter, sniffClient } from './reset-filter.js';
import { SessionRecycler, type RecycleOptions } from './recycle.js';
import { encodeGrpcMessage, GrpcError, GrpcStatus, MessageReader, parseGrpcTimeout } from './wire.js';

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
        // Nothing more of the request will be read: the handler, which may wait for it, hears that the call is over.
        this.cancel();
        return;
      }
      for (const m of messages) if (!this.ended) this.guarded(() => onMessage(m));
    });
    this.stream.once('end', () => {
      if (reader.partial > 0) {
        this.fail(GrpcStatus.INTERNAL, 'the request ended inside a message');
        this.cancel();
      } else this.guarded(onEnd);
    });
  }

  /** True once the client cancelled, the stream broke, the deadline passed, or the request could not be read (too big, cut short). */
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

  /** Runs a handler's listener: one that throws fails its call (a GrpcError's status, else INTERNAL) rather than the server. */
  private guarded(fn: () => void): void {
    try {
      fn();
    } catch (err) {
      if (err instanceof GrpcError) this.fail(err.code, err.details);
      else this.fail(GrpcStatus.INTERNAL, err instanceof Error ? err.message : String(err));
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

/** A unary method: the answer (framed) made from the request's one message; `answer` throws a GrpcError to fail the call with its status. */
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
  /**
   * A connection without a call's activity this long is pinged, and closed
   * unless it answers within as long again (at most 10 s); default 30 s.
   * nghttp2 answers a connection error (a frame above the maximum size, a
   * bad frame) with a GOAWAY and reads nothing more, but Node keeps the
   * socket open for as long as the peer likes; so does a peer that went
   * silent. Every HTTP/2 client answers pings, so idle LBs stay connected.
   */
  readonly idleCheckMs?: number;
}

const IDLE_CHECK_MS = 30_000;

export class GrpcH2Server {
  /** Takes the connections (TCP, or TLS with a client certificate) and hands each to `h2` once its client is known. */
  private readonly front: NetServer;
  /** HTTP/2 over the connections `front` hands it; never listens itself. */
  private readonly h2: Http2Server;
  /** Each open HTTP/2 connection, with its estimate of the resets its peer will send, and its reset filter (other clients than fnts's LB). */
  private readonly sessions = new Map<Http2Session, { readonly recycler: SessionRecycler; readonly filter: ResetFilter | undefined }>();
  /**
   * The raw connections too: a destroyed session still waits for its
   * socket's writes to drain, which a peer that stopped reading never lets
   * happen, so close() cuts them after its grace.
   */
  private readonly sockets = new Set<Socket>();
  /** The filter of the connection being handed to `h2` right now (its session is made meanwhile). */
  private handing: ResetFilter | undefined;

  constructor(private readonly o: GrpcServerOptions) {
    // Room for a call's log in the trailers (FN_MAX_LOG_SIZE_BYTES, base64), and for many calls' frames at once.
    this.h2 = createServer({ settings: { maxHeaderListSize: 64 * 1024 }, maxSendHeaderBlockLength: 8 * 1024 * 1024, maxSessionMemory: 64 });
    const accept = (socket: Socket): void => this.accept(socket);
    if (o.tls) {
      this.front = createTlsServer({ ca: o.tls.ca, key: o.tls.key, cert: o.tls.cert, requestCert: true, rejectUnauthorized: true, ALPNProtocols: ['h2'] }, accept);
      // A TLS handshake that failed (no or a bad client certificate) ends that connection only.
      this.front.on('tlsClientError', () => undefined);
    } else {
      this.front = createNetServer(accept);
    }
    this.h2.on('session', (session: Http2Session) => {
      // Sessions are made as accept() hands a connection over (synchronously): a filtered one's is its filter's.
      const filter = this.handing;
      const recycler = new SessionRecycler(session, { ...o.recycle, ...(filter ? { exact: true } : {}) });
      filter?.onReset(() => recycler.spend());
      this.sessions.set(session, { recycler, filter });
      session.on('error', () => undefined);
      session.once('close', () => this.sessions.delete(session));
      this.watchIdle(session, o.idleCheckMs ?? IDLE_CHECK_MS);
    });
    this.h2.on('sessionError', () => undefined);
    this.h2.on('stream', (stream, headers) => {
      const known = stream.session ? this.sessions.get(stream.session) : undefined;
      known?.recycler.watch(stream);
      known?.filter?.watch(stream);
      try {
        this.route(stream, headers);
      } catch (err) {
        // A stream reset as it arrived: Node refuses to answer it.
        this.o.onError?.(err instanceof Error ? err : new Error(String(err)));
      }
    });
  }

  /**
   * Pings `session` once it has gone `idleMs` without a call's activity
   * (Node's session timeout: streams' frames reset it, pings do not), and
   * again every `idleMs` while it stays idle; one that does not answer in
   * time, or that nghttp2 will not ping (it ended the session), is closed.
   */
  private watchIdle(session: Http2Session, idleMs: number): void {
    const closeIt = (): void => void (session.destroyed || session.destroy());
    session.setTimeout(idleMs, () => {
      if (session.destroyed || session.closed) return;
      const unanswered = setTimeout(closeIt, Math.min(idleMs, 10_000));
      unanswered.unref();
      try {
        const sent = session.ping((err) => {
          clearTimeout(unanswered);
          if (err) closeIt();
          // Answered: watched again (after a timeout fired, only a stream's activity would re-arm it).
          else if (!session.destroyed && !session.closed) this.watchIdle(session, idleMs);
        });
        if (!sent) {
          clearTimeout(unanswered);
          closeIt();
        }
      } catch {
        clearTimeout(unanswered);
        closeIt();
      }
    });
  }

  /** A new connection: fnts's LB goes straight to HTTP/2, any other client through the reset filter (runner/reset-filter.ts). */
  private accept(socket: Socket): void {
    this.sockets.add(socket);
    socket.once('close', () => this.sockets.delete(socket));
    socket.on('error', () => undefined);
    if (this.o.tls && (socket as TLSSocket).alpnProtocol !== 'h2') {
      socket.destroy();
      return;
    }
    socket.setNoDelay(true);
    sniffClient(socket, (client) => {
      if (!client || socket.destroyed) return;
      if (client.kind === 'fnts') {
        socket.unshift(client.head);
        this.h2.emit('connection', socket);
        return;
      }
      const filter = new ResetFilter(socket);
      this.handing = filter;
      try {
        this.h2.emit('connection', filter);
      } finally {
        this.handing = undefined;
      }
      filter.feed(client.head);
    });
  }

  /** Binds `host:port` (0: any free port); answers with the port bound. The error says which variable sets it. */
  listen(host: string, port: number, variable = 'FN_GRPC_PORT'): Promise<number> {
    return new Promise((resolve, reject) => {
      const onError = (err: Error): void => reject(new Error(`could not listen for gRPC on ${host}:${port}: ${err.message}; set ${variable} to a free port`));
      this.front.once('error', onError);
      this.front.listen(port, host, () => {
        this.front.off('error', onError);
        // Later errors (too many open files on accept, ...) end no call in flight: told, not thrown.
        this.front.on('error', (err) => this.o.onError?.(err));
        resolve((this.front.address() as AddressInfo).port);
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
      if (!this.front.listening) {
        resolve();
        return;
      }
      const force = setTimeout(() => {
        for (const s of this.sessions.keys()) s.destroy();
        for (const socket of this.sockets) socket.destroy();
      }, graceMs);
      force.unref();
      this.front.close(() => {
        clearTimeout(force);
        resolve();
      });
      for (const { recycler } of this.sessions.values()) recycler.retire();
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
      if (err instanceof GrpcError) call.fail(err.code, err.details);
      else call.fail(GrpcStatus.INTERNAL, err instanceof Error ? err.message : String(err));
    }
  }
}
