/**
 * One HTTP/2 connection to a runner, for gRPC calls made on it directly
 * (runner/wire.ts says why not through grpc-js): connected when first
 * needed, kept alive with pings, and, after a failure, redialed in the
 * background with a growing pause (100 ms to 1 s) until the runner answers
 * again. Meanwhile `reachable` is false: the LB places nothing here, and a
 * call that asks anyway fails at once, as never sent.
 */
import * as http2 from 'node:http2';
import type { SecureClientSessionOptions } from 'node:http2';
import { isIP } from 'node:net';
import * as tls from 'node:tls';
import { FNTS_CLIENT_SETTING } from './wire.js';

export interface ChannelTls {
  readonly ca: Buffer;
  readonly key: Buffer;
  readonly cert: Buffer;
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
   * Opens a stream with `headers` on the connection (dialing it if need be).
   * Throws when the channel is closed; a connection that fails makes the
   * stream fail with an error (and 'close'), as on any HTTP/2 stream.
   */
  request(headers: http2.OutgoingHttpHeaders): http2.ClientHttp2Stream {
    if (this.closed) throw new Error('the channel is closed');
    return this.connect().request(headers, { endStream: false });
  }

  /**
   * The TLS connection for a session: node:http2 would send the host as
   * the server name even when it is an IP address, which TLS forbids (and
   * Node warns of, DEP0123); the runner's certificate is checked against
   * the host either way.
   */
  private dialTls(): tls.TLSSocket {
    const url = new URL(this.authority);
    const host = url.hostname.replace(/^\[(.*)\]$/, '$1');
    const t = this.o.tls!;
    return tls.connect({ host, port: Number(url.port), ca: t.ca, key: t.key, cert: t.cert, ALPNProtocols: ['h2'], ...(isIP(host) ? {} : { servername: host }) });
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
    const dialTimer = setTimeout(() => session.destroy(new Error(`no connection to ${this.address} within ${CONNECT_TIMEOUT_MS} ms`)), CONNECT_TIMEOUT_MS);
    dialTimer.unref();
    let connected = false;
    let keepalive: NodeJS.Timeout | undefined;
    session.once('connect', () => {
      clearTimeout(dialTimer);
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
    session.on('error', () => undefined);
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
