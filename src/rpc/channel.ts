/**
 * One HTTP/2 connection to a gRPC server (a runner, the pool manager), for
 * gRPC calls made on it directly (wire.ts says why not through grpc-js):
 * connected when first needed, kept alive with pings, and, after a failure,
 * redialed in the background with a growing pause (100 ms to 1 s) until the
 * server answers again. Meanwhile `reachable` is false: the LB places nothing
 * here, and a call that asks anyway fails at once, as never sent.
 *
 * Streams beyond the server's SETTINGS_MAX_CONCURRENT_STREAMS wait in
 * nghttp2's queue (under node:http2) until one ends, then go out: a call is
 * never failed for that limit, only delayed (channel.test.ts shows it).
 */
import * as http2 from 'node:http2';
import type { IncomingHttpHeaders, SecureClientSessionOptions } from 'node:http2';
import { isIP } from 'node:net';
import * as tls from 'node:tls';
import { FNTS_CLIENT_SETTING, GrpcError, GrpcStatus, grpcMessage, grpcTimeout, MAX_MESSAGE_BYTES, MessageReader, statusOfHttp } from './wire.js';

/** A gRPC call's status from its trailers (or a trailers-only answer's headers). */
export interface GrpcEnd {
  readonly code: number;
  readonly details: string;
  readonly headers: IncomingHttpHeaders;
}

/** The status in `headers`; undefined when they carry none (response headers that are not trailers-only). */
export function grpcEnd(headers: IncomingHttpHeaders): GrpcEnd | undefined {
  const status = headers['grpc-status'];
  if (status === undefined) return undefined;
  return { code: Number(status), details: grpcMessage(headers['grpc-message']), headers };
}

/** Request headers of a gRPC call on `path`, with `metadata`, due within `timeoutMs`. */
export function grpcHeaders(path: string, metadata: Record<string, string>, timeoutMs: number): Record<string, string> {
  return {
    ...metadata,
    [http2.constants.HTTP2_HEADER_METHOD]: 'POST',
    [http2.constants.HTTP2_HEADER_PATH]: path,
    [http2.constants.HTTP2_HEADER_CONTENT_TYPE]: 'application/grpc',
    te: 'trailers',
    'grpc-timeout': grpcTimeout(timeoutMs),
    'user-agent': 'fnts-lb',
  };
}

export interface ChannelTls {
  readonly ca: Buffer;
  readonly key: Buffer;
  readonly cert: Buffer;
  /**
   * The name (DNS or IP) the server's certificate must carry; default: the
   * host dialled. For servers whose addresses are not known when their
   * certificates are made (a pool manager's runners on swarm or kubernetes).
   */
  readonly serverName?: string | undefined;
}

export interface ChannelOptions {
  /** Mutual TLS to the runner; plaintext when absent. */
  readonly tls?: ChannelTls | undefined;
  /** The most header bytes accepted (the runner sends a call's log in its trailers). */
  readonly maxHeaderListBytes?: number;
  /** How often the connection is pinged (default 10 s; doubled each time the runner says too many pings). */
  readonly keepaliveMs?: number;
}

const KEEPALIVE_MS = 10_000;
/** A runner that keeps refusing pings (gRPC servers allow one per 5 minutes by default) is pinged at most this often. */
const MAX_KEEPALIVE_MS = 10 * 60_000;
const KEEPALIVE_TIMEOUT_MS = 5_000;
const FIRST_REDIAL_MS = 100;
const MAX_REDIAL_MS = 1_000;
const CONNECT_TIMEOUT_MS = 5_000;

export class H2Channel {
  private session: http2.ClientHttp2Session | undefined;
  /** Whether each connection's SETTINGS from the server have arrived (`arrived` rejects if it closes first). */
  private readonly settings = new WeakMap<http2.ClientHttp2Session, { known: boolean; readonly arrived: Promise<void> }>();
  private drainingSession: http2.Http2Session | undefined;
  private failing = false;
  private redialMs = FIRST_REDIAL_MS;
  private redialTimer: NodeJS.Timeout | undefined;
  private closed = false;
  private readonly authority: string;
  private keepaliveMs: number;

  constructor(
    readonly address: string,
    private readonly o: ChannelOptions = {},
  ) {
    this.authority = `${o.tls ? 'https' : 'http'}://${address}`;
    this.keepaliveMs = o.keepaliveMs ?? KEEPALIVE_MS;
  }

  /** How often the connection is pinged now. */
  get keepaliveIntervalMs(): number {
    return this.keepaliveMs;
  }

  /** False after the connection failed, until a redial succeeds. */
  get reachable(): boolean {
    return !this.failing;
  }

  /** True while the connection in use is one on which the runner said it drains (a new one clears it). */
  get draining(): boolean {
    return this.drainingSession !== undefined && this.drainingSession === this.session;
  }

  /** The runner said, on `session`, that it drains: no new call should go there while that connection lasts. */
  markDraining(session: http2.Http2Session | undefined): void {
    if (session && session === this.session) this.drainingSession = session;
  }

  /**
   * Dials the runner now rather than at the first call, so that `reachable`
   * tells the truth before any call (the LB's readiness asks it).
   */
  open(): void {
    if (!this.closed) this.connect();
  }

  /**
   * Opens a stream with `headers` on the connection (dialing it if need be),
   * once the server's SETTINGS have arrived on it: a stream sent before
   * them could exceed the server's concurrent-stream limit, which it would
   * refuse (REFUSED_STREAM); after them nghttp2 holds such a stream until
   * one ends. Rejects when the channel is closed, or the connection closes
   * before its SETTINGS came (it failed); a connection that fails later
   * makes the stream fail with an error (and 'close'), as on any HTTP/2
   * stream.
   */
  async request(headers: http2.OutgoingHttpHeaders): Promise<http2.ClientHttp2Stream> {
    for (;;) {
      if (this.closed) throw new Error('the channel is closed');
      const session = this.connect();
      const settings = this.settings.get(session);
      if (!settings || settings.known) return session.request(headers, { endStream: false });
      await settings.arrived;
      // The connection may have been replaced meanwhile (a GOAWAY): the loop takes the current one.
    }
  }

  /**
   * One unary gRPC call: `request` (one framed message) to `path`, answered
   * with the server's one message (unframed). Rejects with a GrpcError: the
   * server's status; DEADLINE_EXCEEDED when no answer came within
   * `timeoutMs` (the server is told, the stream is cancelled); UNAVAILABLE
   * when the connection failed or the channel is closed.
   */
  async unary(path: string, request: Buffer, timeoutMs: number, metadata: Record<string, string> = {}): Promise<Buffer> {
    const due = Date.now() + timeoutMs;
    let stream: http2.ClientHttp2Stream;
    try {
      stream = await this.request(grpcHeaders(path, metadata, timeoutMs));
    } catch (err) {
      throw new GrpcError(GrpcStatus.UNAVAILABLE, err instanceof Error ? err.message : String(err), { cause: err });
    }
    return this.unaryOn(stream, request, timeoutMs, Math.max(1, due - Date.now()));
  }

  /** The rest of unary(), on its stream: `leftMs` of its `timeoutMs` remain. */
  private unaryOn(stream: http2.ClientHttp2Stream, request: Buffer, timeoutMs: number, leftMs: number): Promise<Buffer> {
    return new Promise((resolve, reject) => {
      let failure: GrpcError | undefined;
      const cancel = (err: GrpcError): void => {
        failure ??= err;
        if (!stream.closed) stream.close(http2.constants.NGHTTP2_CANCEL);
      };
      const timer = setTimeout(() => cancel(new GrpcError(GrpcStatus.DEADLINE_EXCEEDED, `no answer from ${this.address} within ${timeoutMs} ms`)), leftMs);
      timer.unref();
      const reader = new MessageReader(MAX_MESSAGE_BYTES);
      let answer: Buffer | undefined;
      let end: GrpcEnd | undefined;
      stream.on('response', (headers) => {
        end = grpcEnd(headers);
        const status = Number(headers[http2.constants.HTTP2_HEADER_STATUS]);
        if (status !== 200) cancel(new GrpcError(statusOfHttp(status), `${this.address} answered HTTP ${status}`));
      });
      stream.on('data', (chunk: Buffer) => {
        try {
          for (const message of reader.push(chunk)) answer ??= message;
        } catch (err) {
          cancel(new GrpcError(GrpcStatus.RESOURCE_EXHAUSTED, err instanceof Error ? err.message : String(err)));
        }
      });
      stream.on('trailers', (headers) => (end = grpcEnd(headers) ?? { code: GrpcStatus.UNKNOWN, details: 'trailers without a grpc-status', headers }));
      // A connection that failed or went away: nothing reached the server, or its answer did not reach us.
      stream.on('error', (err: Error) => (failure ??= new GrpcError(GrpcStatus.UNAVAILABLE, err.message, { cause: err })));
      stream.on('close', () => {
        clearTimeout(timer);
        if (failure) reject(failure);
        else if (!end) reject(new GrpcError(GrpcStatus.UNAVAILABLE, `stream reset by ${this.address} (code ${stream.rstCode})`));
        else if (end.code !== GrpcStatus.OK) reject(new GrpcError(end.code, end.details));
        else if (answer === undefined) reject(new GrpcError(GrpcStatus.INTERNAL, `${this.address} answered OK without a message`));
        else resolve(answer);
      });
      stream.end(request);
    });
  }

  /**
   * The TLS connection for a session: node:http2 would send the host as
   * the server name even when it is an IP address, which TLS forbids (and
   * Node warns of, DEP0123); the runner's certificate is checked against
   * the host either way, or against `serverName` when one is given.
   */
  private dialTls(): tls.TLSSocket {
    const url = new URL(this.authority);
    const host = url.hostname.replace(/^\[(.*)\]$/, '$1');
    const t = this.o.tls!;
    const name = t.serverName ?? host;
    return tls.connect({
      host,
      port: Number(url.port),
      ca: t.ca,
      key: t.key,
      cert: t.cert,
      ALPNProtocols: ['h2'],
      ...(isIP(name) ? {} : { servername: name }),
      ...(t.serverName === undefined ? {} : { checkServerIdentity: (_host: string, cert: tls.PeerCertificate) => tls.checkServerIdentity(name, cert) }),
    });
  }

  private connect(): http2.ClientHttp2Session {
    if (this.session && !this.session.closed && !this.session.destroyed) return this.session;
    const options: SecureClientSessionOptions = {
      // FNTS_CLIENT_SETTING: this client half-closes its streams (a runner need not filter its resets).
      settings: { maxHeaderListSize: this.o.maxHeaderListBytes ?? 4 * 1024 * 1024, enablePush: false, initialWindowSize: 1024 * 1024, customSettings: { [FNTS_CLIENT_SETTING]: 1 } },
      maxHeaderListPairs: 4096,
      ...(this.o.tls ? { ca: this.o.tls.ca, key: this.o.tls.key, cert: this.o.tls.cert, ALPNProtocols: ['h2'], createConnection: () => this.dialTls() } : {}),
    };
    const session = http2.connect(this.authority, options);
    this.session = session;
    let failure: Error | undefined;
    const settings = {
      known: false,
      arrived: new Promise<void>((resolve, reject) => {
        session.once('remoteSettings', () => {
          settings.known = true;
          resolve();
        });
        session.once('close', () => reject(failure ?? new Error(`the connection to ${this.address} closed before it was set up`)));
      }),
    };
    settings.arrived.catch(() => undefined);
    this.settings.set(session, settings);
    const dialTimer = setTimeout(() => session.destroy(new Error(`no connection to ${this.address} within ${CONNECT_TIMEOUT_MS} ms`)), CONNECT_TIMEOUT_MS);
    dialTimer.unref();
    let connected = false;
    let keepalive: NodeJS.Timeout | undefined;
    // A server that accepts the connection and never speaks HTTP/2 counts as unreachable too.
    session.once('remoteSettings', () => clearTimeout(dialTimer));
    session.once('connect', () => {
      connected = true;
      this.failing = false;
      this.redialMs = FIRST_REDIAL_MS;
      // The connection's own window: a large answer streams without waiting on window updates.
      try {
        session.setLocalWindowSize(8 * 1024 * 1024);
      } catch {
        // a closing session: the default window still works
      }
      keepalive = this.keepalive(session);
    });
    // Errors end in 'close' (handled there); the streams on the session get their own.
    session.on('error', (err: Error) => (failure ??= err));
    session.once('close', () => {
      clearTimeout(dialTimer);
      if (this.session === session) this.session = undefined;
      clearInterval(keepalive);
      // A connection that never came up is a runner that cannot be reached now.
      if (!connected) this.fail();
      // One that was up and ended (the runner retired it, restarted, or died): dialed again in the
      // background, so that a runner that is gone shows as unreachable without a call failing first.
      else this.redialSoon();
    });
    session.once('goaway', (code: number, _lastStreamId: number, data?: Buffer) => {
      // The runner is closing this connection (draining, or restarting): new calls get a new one, and this
      // one closes once its calls are done.
      if (this.session === session) this.session = undefined;
      session.close();
      // gRPC's "too_many_pings" (Fn's Go runners enforce a ping policy): ping half as often from now on, as grpc-js does.
      if (code === http2.constants.NGHTTP2_ENHANCE_YOUR_CALM && data?.toString().includes('too_many_pings')) {
        this.keepaliveMs = Math.min(MAX_KEEPALIVE_MS, this.keepaliveMs * 2);
      }
    });
    return session;
  }

  /** Dials again after the first redial pause, unless a connection exists by then; a failure there is fail()'s. */
  private redialSoon(): void {
    if (this.closed || this.redialTimer) return;
    this.redialTimer = setTimeout(() => {
      this.redialTimer = undefined;
      if (this.closed || (this.session && !this.session.destroyed)) return;
      this.connect();
    }, FIRST_REDIAL_MS);
    this.redialTimer.unref();
  }

  /** The connection failed: unreachable until the background redial gets through. */
  private fail(): void {
    if (this.closed) return;
    this.failing = true;
    if (this.redialTimer) return;
    this.redialTimer = setTimeout(() => {
      this.redialTimer = undefined;
      if (this.closed || (this.session && !this.session.destroyed)) return;
      this.redialMs = Math.min(MAX_REDIAL_MS, this.redialMs * 2);
      this.connect();
    }, this.redialMs);
    this.redialTimer.unref();
  }

  /** Pings the runner every KEEPALIVE_MS; a ping unanswered for KEEPALIVE_TIMEOUT_MS ends the connection. */
  private keepalive(session: http2.ClientHttp2Session): NodeJS.Timeout {
    const timer = setInterval(() => {
      // A connection on its way out (closing after a GOAWAY, or destroyed) is not pinged: ping() would throw.
      if (session.closed || session.destroyed) {
        clearInterval(timer);
        return;
      }
      const timeout = setTimeout(() => session.destroy(new Error('keepalive ping unanswered')), Math.min(KEEPALIVE_TIMEOUT_MS, this.keepaliveMs));
      timeout.unref();
      let sent = false;
      try {
        sent = session.ping((err) => {
          clearTimeout(timeout);
          if (err) session.destroy(err);
        });
      } catch (err) {
        session.destroy(err instanceof Error ? err : new Error(String(err)));
      }
      if (!sent) clearTimeout(timeout);
    }, this.keepaliveMs);
    timer.unref();
    return timer;
  }

  close(): void {
    this.closed = true;
    clearTimeout(this.redialTimer);
    this.session?.close();
    this.session = undefined;
  }
}
