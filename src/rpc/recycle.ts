/**
 * Why and how the runner retires its own HTTP/2 connections, gracefully.
 *
 * A gRPC client that never half-closes its side of a stream (Fn's LB,
 * grpc-go: it sends the body's last DataFrame but never CloseSend) answers
 * the end of every call (our trailers, END_STREAM) with RST_STREAM
 * (NO_ERROR). Node 20's nghttp2 counts every RST_STREAM a server receives
 * in a token bucket (1000 tokens, 33 more a second; Node 20 cannot change
 * either) and, once it is empty, sends GOAWAY(INTERNAL_ERROR) naming the
 * last stream it received: streams the client opened after that fail as
 * "the connection is draining", calls the LB had already handed over. At
 * a few hundred calls a second that happens within seconds.
 *
 * nghttp2 stops counting once the session has submitted a GOAWAY of its
 * own. So each session keeps its own estimate of the resets its peer will
 * send, and well before the bucket could be empty it retires the
 * connection the way gRPC servers do (two GOAWAYs):
 *
 *   open ──tokens low / close()──▶ notice: GOAWAY(NO_ERROR, 2^31-1), PING, PING
 *                                      │ second PING acknowledged (or NOTICE_TIMEOUT_MS)
 *                                      ▼
 *                                  closing: GOAWAY(NO_ERROR, last stream received);
 *                                  streams in flight finish, then the connection closes
 *
 * The notice names no stream as refused: the client keeps every stream it
 * opened and opens new ones on a new connection. The second PING's
 * acknowledgement comes after the client read the notice (see retire()),
 * so by then every stream it will ever open here has arrived, and the
 * final GOAWAY refuses none of them.
 */
import { constants as h2, type Http2Session, type ServerHttp2Stream } from 'node:http2';

/** nghttp2's stream reset limit as Node 20 sets it (nghttp2_option_set_stream_reset_rate_limit's defaults). */
export const NGHTTP2_RESET_BURST = 1000;
export const NGHTTP2_RESET_RATE_PER_S = 33;

/**
 * The share of the bucket left in our estimate when the connection is
 * retired (200 of nghttp2's 1000): room for the estimate's error, since
 * nghttp2 refills once per whole second of its own clock (up to a
 * second's tokens later than we do). Resets that arrive after the notice
 * went out are not counted by nghttp2 at all.
 */
const LOW_WATER_SHARE = 0.2;

/** gRPC's shutdown notice names the highest stream id there is: no stream is refused. */
const NOTICE_LAST_STREAM_ID = 2 ** 31 - 1;

/** A client that does not acknowledge the notice's PING within this long is told the final GOAWAY anyway. */
const NOTICE_TIMEOUT_MS = 2000;

export interface RecycleOptions {
  /** The bucket's size and refill (nghttp2's, by default). */
  readonly burst?: number;
  readonly ratePerS?: number;
  /** Milliseconds on a monotonic clock (performance.now by default). */
  readonly now?: () => number;
  /**
   * Resets are told by spend(), each one that reaches nghttp2 (the
   * connection's reset filter sees them); watch() then estimates nothing.
   */
  readonly exact?: boolean;
  /** Told when the connection is retired because its peer's resets would soon be refused. Must not throw. */
  readonly onRetire?: (expectedResets: number) => void;
}

/** One server session's estimate of its peer's resets, and its graceful retirement. */
export class SessionRecycler {
  private tokens: number;
  private second: number;
  private spent = 0;
  private retiring = false;
  private readonly burst: number;
  private readonly rate: number;
  private readonly now: () => number;
  private readonly lowWater: number;

  constructor(
    private readonly session: Http2Session,
    private readonly o: RecycleOptions = {},
  ) {
    this.burst = o.burst ?? NGHTTP2_RESET_BURST;
    this.rate = o.ratePerS ?? NGHTTP2_RESET_RATE_PER_S;
    this.now = o.now ?? (() => performance.now());
    this.tokens = this.burst;
    this.lowWater = Math.floor(this.burst * LOW_WATER_SHARE);
    this.second = Math.floor(this.now() / 1000);
  }

  /** True once the notice went out: the peer opens no new stream here. */
  get isRetiring(): boolean {
    return this.retiring;
  }

  /**
   * Counts `stream` when it closes if its peer reset it, or will: it had
   * not half-closed before we ended our side (a grpc-go client then resets
   * it), or it closed without our end (a cancel). A peer that half-closes
   * with its request (fnts's LB) costs nothing, except for an answer so
   * quick that it went out before the peer's end was read (counted: the
   * estimate errs on the side of retiring early).
   */
  watch(stream: ServerHttp2Stream): void {
    if (this.o.exact) return;
    let peerEndedFirst = false;
    stream.once('end', () => {
      if (!stream.writableEnded) peerEndedFirst = true;
    });
    stream.once('close', () => {
      if (!peerEndedFirst) this.spend();
    });
  }

  /**
   * Retires the connection: the notice, then (once the peer read it) the
   * final GOAWAY; streams in flight finish. Idempotent.
   */
  retire(): void {
    if (this.retiring) return;
    this.retiring = true;
    const { session } = this;
    if (session.closed || session.destroyed) return;
    try {
      session.goaway(h2.NGHTTP2_NO_ERROR, NOTICE_LAST_STREAM_ID);
    } catch {
      // Destroyed meanwhile: nothing left to retire.
      return;
    }
    // Set once the notice is out; close() may run before (a ping refused at once).
    let timer: NodeJS.Timeout | undefined = undefined;
    const close = (): void => {
      clearTimeout(timer);
      if (!session.closed && !session.destroyed) session.close();
    };
    timer = setTimeout(close, NOTICE_TIMEOUT_MS);
    timer.unref();
    /** Pings; `then` once acknowledged (a failed or refused ping closes at once). */
    const ping = (then: () => void): void => {
      try {
        if (!session.ping((err) => (err ? close() : then()))) close();
      } catch {
        close();
      }
    };
    // nghttp2 sends PINGs ahead of every other frame it has queued, the notice
    // included: a PING sent with it may be acknowledged before the client read
    // the notice, and a client that opened a stream in between (grpc-go does,
    // from other goroutines) would have it refused by the final GOAWAY. The
    // first PING's acknowledgement comes once the notice has left (it was
    // queued before that PING went out); the second PING follows the notice
    // on the wire, so its acknowledgement proves the client read it.
    ping(() => ping(close));
  }

  /** One reset the peer sent (or will send). */
  spend(): void {
    if (this.retiring || this.session.closed || this.session.destroyed) return;
    const second = Math.floor(this.now() / 1000);
    if (second > this.second) {
      this.tokens = Math.min(this.burst, this.tokens + (second - this.second) * this.rate);
      this.second = second;
    }
    this.tokens--;
    this.spent++;
    if (this.tokens > this.lowWater) return;
    try {
      this.o.onRetire?.(this.spent);
    } catch {
      // A listener that throws changes nothing here.
    }
    this.retire();
  }
}
