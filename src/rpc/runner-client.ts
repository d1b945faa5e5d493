/**
 * The LB's side of the runner protocol: one gRPC channel per runner, and one
 * Engage stream per attempt to run a call there.
 *
 * An attempt ends in one of three ways:
 * - `refused`: the runner answered CallFinished{503} before the call started
 *   (no capacity, or draining): nothing ran, place it elsewhere;
 * - `failed`: the stream broke before the runner accepted the TryCall (it
 *   could not be reached, or was gone): nothing ran, place it elsewhere;
 * - `committed`: the runner accepted the call. From here it is never sent
 *   anywhere else, whatever happens to the stream; its answer (or error)
 *   is the caller's.
 *
 * "Accepted" is the runner's response headers: fnts runners send them as
 * soon as they take a TryCall, before the call starts; Fn's runners send
 * them with their first message. A stream that fails UNAVAILABLE before
 * any headers is a call that never reached a runner.
 */
import { constants as h2, type ClientHttp2Stream, type IncomingHttpHeaders } from 'node:http2';
import { PassThrough } from 'node:stream';
import { type CallResponse, type RawHeaders, triggerAnswer } from '../call/index.js';
import { isLoopbackHost, remoteError, type Call } from '../models/index.js';
import {
  DRAINING_HEADER,
  LOG_EXTENSION,
  LOG_TRAILER,
  MAKE_ROOM_EXTENSION,
  MAX_FRAME_BYTES,
  roomFromRefusal,
  wireCallJson,
  type CallFinishedMsg,
  type RunnerMsg,
  type RunnerStatusMsg,
} from './runner-protocol.js';
import { asBuffer, decodeRunnerMsg, decodeRunnerStatus, encodeClientMsg, encodeEmpty, ENGAGE_PATH, GrpcStatus, MAX_MESSAGE_BYTES, MessageReader, STATUS_PATH } from './wire.js';
import { grpcEnd, grpcHeaders, H2Channel, type ChannelTls, type GrpcEnd } from './channel.js';

export type Attempt =
  | {
      readonly kind: 'refused';
      readonly reason: string;
      /** fnts runners say how long until they could make room for the call (ms); undefined: unknown. */
      readonly roomMs?: number | undefined;
    }
  | { readonly kind: 'failed'; readonly reason: string }
  | {
      readonly kind: 'committed';
      /** The runner's answer: resolves with status, headers and a body stream; rejects with the runner's error. */
      readonly response: Promise<CallResponse>;
      /** The runner's CallFinished, once the call is over; undefined if the stream ended without one. Never rejects. */
      readonly finished: Promise<CallFinishedMsg | undefined>;
      /** The call's log, when asked for (engage's `wantLog`) and the runner sends it (fnts runners do); '' otherwise. Never rejects. */
      readonly log: Promise<string>;
      /** Gives up on the call: the runner is told (the stream is cancelled). */
      cancel(): void;
    };

export interface RunnerClientOptions {
  /** Mutual TLS to the runner (CA, key, certificate); plaintext when absent. */
  readonly tls?: ChannelTls | undefined;
  /** Added to each call's timeout for the stream's deadline (the runner enforces the timeout itself). */
  readonly graceMs?: number;
}

/**
 * What an LB sends to whichever runner takes a call, made once per call
 * (a call may be offered to many runners before one takes it): the call
 * as TryCall's models_call_json, its body as DataFrames (an empty body is
 * one empty frame with eof), and the Engage stream's metadata (the
 * caller's trace context).
 */
export interface EngageRequest {
  readonly call: Call;
  readonly callJson: string;
  readonly bodyFrames: Buffer;
  readonly metadata: Record<string, string>;
  /** callJson holds the fn's secrets: never sent on a connection that is not `secure`. */
  readonly withSecrets?: boolean;
}

/**
 * `secrets`: the values of the fn's secrets, sent in models_call_json
 * (SECRETS_FIELD); the request then says so (`withSecrets`), and is to be
 * sent only to runners whose connection is `secure`.
 */
export function engageRequest(call: Call, body: Buffer, metadata: Record<string, string> = {}, secrets?: Readonly<Record<string, string>>): EngageRequest {
  const frames: Buffer[] = [];
  let at = 0;
  do {
    const end = Math.min(body.length, at + MAX_FRAME_BYTES);
    frames.push(encodeClientMsg({ data: { data: body.subarray(at, end), eof: end === body.length } }));
    at = end;
  } while (at < body.length);
  return {
    call,
    callJson: JSON.stringify(wireCallJson(call, secrets)),
    bodyFrames: frames.length === 1 ? frames[0]! : Buffer.concat(frames),
    metadata,
    ...(secrets !== undefined ? { withSecrets: true } : {}),
  };
}

/** One attempt's bytes: its TryCall (the extensions it asks for), then the body's frames, as one write. */
function requestBytes(r: EngageRequest, o: EngageOptions): Buffer {
  const extensions: Record<string, string> = {};
  if (o.wantLog) extensions[LOG_EXTENSION] = '1';
  if (o.makeRoom) extensions[MAKE_ROOM_EXTENSION] = '1';
  return Buffer.concat([encodeClientMsg({ try: { models_call_json: r.callJson, slot_hash_id: '', extensions } }), r.bodyFrames]);
}

export interface EngageOptions {
  /** Ask for the call's log (fnts runners send it in the trailers). */
  readonly wantLog?: boolean;
  /** The call has waited: ask the runner to make room for it (fnts runners evict idle containers of other fns). */
  readonly makeRoom?: boolean;
}

export class RunnerClient {
  private readonly channel: H2Channel;
  private readonly graceMs: number;
  /** The connection has mutual TLS, or the runner is on loopback: a call's secrets may go over it. */
  readonly secure: boolean;

  constructor(
    readonly address: string,
    options: RunnerClientOptions = {},
  ) {
    // Room for a call's log in the trailers (FN_MAX_LOG_SIZE_BYTES, 1 MiB by default, base64).
    this.channel = new H2Channel(address, { tls: options.tls, maxHeaderListBytes: 4 * 1024 * 1024 });
    this.graceMs = options.graceMs ?? 10_000;
    this.secure = options.tls !== undefined || loopbackAddress(address);
    this.channel.open();
  }

  /** True when the runner is connected or may be (no failed connection since it last answered). */
  get reachable(): boolean {
    return this.channel.reachable;
  }

  /** True while the runner drains (an fnts runner said so when it refused a call): place nothing here. */
  get draining(): boolean {
    return this.channel.draining;
  }

  /** Tries to run a call on this runner (see Attempt and Engagement). Never rejects. */
  async engage(request: EngageRequest, options: EngageOptions = {}): Promise<Attempt> {
    // The LB checks first (lb-agent.ts); this holds whatever calls it.
    if (request.withSecrets === true && !this.secure) return { kind: 'failed', reason: `${this.address} is reached in plaintext: a call's secrets are not sent there` };
    const timeoutMs = request.call.fn.timeoutS * 1000 + this.graceMs;
    let stream: ClientHttp2Stream;
    try {
      stream = await this.channel.request(grpcHeaders(ENGAGE_PATH, request.metadata, timeoutMs));
    } catch (err) {
      // The channel is closed, or the connection failed before the runner spoke: nothing reached it.
      return { kind: 'failed', reason: err instanceof Error ? err.message : String(err) };
    }
    return new Promise<Attempt>((resolve) => new Engagement(stream, request.call, this.channel, timeoutMs, resolve).offer(requestBytes(request, options)));
  }

  /** The runner's RunnerStatus (calls in flight, received, handled); rejects with a GrpcError. */
  async status(timeoutMs = 2000): Promise<RunnerStatusMsg> {
    return decodeRunnerStatus(await this.channel.unary(STATUS_PATH, encodeEmpty(), timeoutMs));
  }

  close(): void {
    this.channel.close();
  }
}

/*
 * One attempt, phase by phase:
 *
 *   offered ──response headers──▶ accepted
 *      │                              │
 *      ├──────────────────────────────┴──▶ committed ──the answer's end is not in this read──▶ streaming
 *      │                              │        │                                                  │
 *      └── CallFinished, or the ──────┴────────┴── CallFinished, or the stream closes ────────────┴──▶ over
 *          stream closes
 *
 * offered: the TryCall and the body are sent; accepted: the runner's
 * response headers said it took the TryCall (an fnts runner sends them at
 * once, Fn's with its first message); committed: the attempt said so, the
 * answer is the caller's, not handed on yet; streaming: handed on with a
 * body the frames still to come go to; over: a CallFinished came or the
 * stream closed, nothing more is read.
 *
 * How the attempt ends is decided once, in `decide`, by the event and the
 * phase it finds (offered or accepted; later the verdict stands):
 * - refused: a CallFinished that refuses (503, never started);
 * - failed: the stream closed in offered with UNAVAILABLE,
 *   DEADLINE_EXCEEDED or CANCELLED: nothing reached the runner;
 * - committed: anything else (a result start or data, a CallFinished that
 *   is not a refusal, a close after the runner accepted or with another
 *   status).
 * A committed answer is handed on whole (a Buffer body: the runner sent it,
 * CallFinished included, in one read), or as a stream, or fails with the
 * runner's error (its CallFinished) or the stream's (502).
 */
type Phase = 'offered' | 'accepted' | 'committed' | 'streaming' | 'over';

type Verdict = Attempt['kind'];

/** Why a stream ended without an OK status. */
interface Failure {
  readonly code: number;
  readonly details: string;
}

/** What can decide an attempt. */
type Event = { readonly kind: 'answer' } | { readonly kind: 'finished'; readonly finished: CallFinishedMsg } | { readonly kind: 'closed'; readonly failure: Failure | undefined };

/** A stream that ended with these before the runner accepted never reached it. */
const NEVER_ARRIVED: ReadonlySet<number> = new Set([GrpcStatus.UNAVAILABLE, GrpcStatus.DEADLINE_EXCEEDED, GrpcStatus.CANCELLED]);

/** Fn's NACK: a CallFinished for a call the runner never started, which an LB may place elsewhere. */
function isRefusal(f: CallFinishedMsg): boolean {
  return !f.success && f.errorCode === 503 && f.startedAt === '';
}

class Engagement {
  private phase: Phase = 'offered';
  private verdict: Verdict | undefined;
  /** The runner's response headers were a gRPC answer's (200, not trailers-only): it took the TryCall. */
  private accepted = false;
  /** The runner's response headers said it drains (fnts runners, on refusals). */
  private drains = false;
  /** The answer's status and headers: its result start, or 200 at its first data (Fn's runner writes 200 then). */
  private head: { status: number; headers: RawHeaders } | undefined;
  /** Body frames that came before the answer was handed on (a whole answer comes in one read). */
  private early: Uint8Array[] = [];
  private body: PassThrough | undefined;
  /** The committed attempt's answer, until it is handed on or failed. */
  private answer: { resolve(r: CallResponse): void; reject(err: unknown): void } | undefined;
  /** How the gRPC call ended: its trailers (or a trailers-only answer's headers). */
  private end: GrpcEnd | undefined;
  /** What we made of a stream that broke, or that we cancelled. */
  private broken: Failure | undefined;
  private readonly reader = new MessageReader(MAX_MESSAGE_BYTES);
  private readonly deadline: NodeJS.Timeout;
  private settleFinished!: (f: CallFinishedMsg | undefined) => void;
  private readonly finished = new Promise<CallFinishedMsg | undefined>((resolve) => (this.settleFinished = resolve));
  private settleLog!: (log: string) => void;
  private readonly log = new Promise<string>((resolve) => (this.settleLog = resolve));

  constructor(
    private readonly stream: ClientHttp2Stream,
    private readonly call: Call,
    private readonly channel: H2Channel,
    timeoutMs: number,
    /** Resolves engage(): called once, by decide. */
    private readonly settle: (attempt: Attempt) => void,
  ) {
    this.deadline = setTimeout(() => this.cancel(GrpcStatus.DEADLINE_EXCEEDED, 'Deadline exceeded'), timeoutMs);
    this.deadline.unref();
    stream.on('response', (headers) => this.onResponse(headers));
    stream.on('data', (chunk: Buffer) => this.onData(chunk));
    stream.on('trailers', (headers) => (this.end = grpcEnd(headers) ?? { code: GrpcStatus.UNKNOWN, details: 'trailers without a grpc-status', headers }));
    // A connection that failed or went away before the runner answered: nothing reached it.
    stream.on('error', (err: Error) => (this.broken ??= { code: GrpcStatus.UNAVAILABLE, details: err.message }));
    stream.on('close', () => this.onClose());
  }

  /** Sends the attempt's bytes (TryCall and body) and half-closes the stream. */
  offer(bytes: Buffer): void {
    this.stream.end(bytes);
  }

  /**
   * The one place that decides how the attempt ends (see the diagram):
   * `event` in offered or accepted gives the verdict and tells engage();
   * after that the verdict stands.
   */
  private decide(event: Event): Verdict {
    if (this.verdict) return this.verdict;
    if (event.kind === 'finished' && isRefusal(event.finished)) {
      this.verdict = 'refused';
      if (this.drains) this.channel.markDraining(this.stream.session);
      this.settle({ kind: 'refused', reason: event.finished.errorStr || 'runner too busy', roomMs: roomFromRefusal(event.finished) });
    } else if (event.kind === 'closed' && this.phase === 'offered' && event.failure && NEVER_ARRIVED.has(event.failure.code)) {
      this.verdict = 'failed';
      this.settle({ kind: 'failed', reason: event.failure.details });
    } else {
      this.verdict = 'committed';
      this.phase = 'committed';
      const response = new Promise<CallResponse>((resolve, reject) => (this.answer = { resolve, reject }));
      response.catch(() => undefined);
      this.settle({ kind: 'committed', response, finished: this.finished, log: this.log, cancel: () => this.cancel() });
    }
    return this.verdict;
  }

  private onResponse(headers: IncomingHttpHeaders): void {
    // A trailers-only answer is an error before anything was accepted.
    this.end = grpcEnd(headers);
    if (this.end) return;
    const status = Number(headers[h2.HTTP2_HEADER_STATUS]);
    if (status !== 200) this.broken = { code: status === 503 || status === 502 || status === 504 ? GrpcStatus.UNAVAILABLE : GrpcStatus.UNKNOWN, details: `the runner answered HTTP ${status}` };
    else {
      this.accepted = true;
      if (this.phase === 'offered') this.phase = 'accepted';
    }
    this.drains = headers[DRAINING_HEADER] === '1';
  }

  private onData(chunk: Buffer): void {
    try {
      for (const bytes of this.reader.push(chunk)) this.onMessage(decodeRunnerMsg(bytes));
    } catch (err) {
      this.cancel(GrpcStatus.INTERNAL, `a bad message from the runner: ${err instanceof Error ? err.message : String(err)}`);
      return;
    }
    // The answer began and its end is not in this read: it streams.
    if (this.phase === 'committed' && this.head) this.handOn(false);
  }

  private onMessage(msg: RunnerMsg): void {
    if (this.phase === 'over') return;
    if (msg.result_start) {
      const http = msg.result_start.http;
      const headers: RawHeaders = [];
      for (const h of http?.headers ?? []) headers.push(h.key, h.value);
      this.head = { status: http?.status_code || 200, headers };
      this.decide({ kind: 'answer' });
    } else if (msg.data) {
      if (!this.head) {
        this.head = { status: 200, headers: [] };
        this.decide({ kind: 'answer' });
      }
      const data = msg.data.data;
      if (data.length === 0) return;
      if (!this.body) this.early.push(data);
      else if (!this.body.write(data)) {
        this.stream.pause();
        this.body.once('drain', () => this.stream.resume());
      }
    } else if (msg.finished) {
      const f = msg.finished;
      this.settleFinished(f);
      const verdict = this.decide({ kind: 'finished', finished: f });
      this.phase = 'over';
      if (verdict === 'refused') return;
      if (this.head || f.success) {
        // A success without a result start: Fn's runner answered 200 with no body.
        this.head ??= { status: 200, headers: [] };
        this.handOn(true);
        this.body?.end();
      } else {
        this.answer?.reject(remoteError(f.errorCode || 500, f.errorStr || 'Unknown Error From Pure Runner', f.errorUser));
      }
    }
  }

  /**
   * Hands the committed answer on: with `whole`, the body is every frame
   * that came, else a stream the frames still to come go to. Once only.
   */
  private handOn(whole: boolean): void {
    const answer = this.answer;
    if (!answer || !this.head) return;
    this.answer = undefined;
    const { status, headers } = this.call.triggerId !== undefined ? triggerAnswer(this.head.status, this.head.headers) : this.head;
    const early = this.early;
    this.early = [];
    if (whole) {
      answer.resolve({ status, headers, body: early.length === 1 ? asBuffer(early[0]!) : Buffer.concat(early) });
      return;
    }
    this.phase = 'streaming';
    const body = (this.body = new PassThrough());
    // The caller left or the answer was dropped: the runner is told.
    body.once('close', () => {
      if (this.phase !== 'over') this.cancel();
    });
    for (const b of early) body.write(b);
    answer.resolve({ status, headers, body });
  }

  private onClose(): void {
    clearTimeout(this.deadline);
    const logBytes = this.end?.headers[LOG_TRAILER];
    this.settleLog(typeof logBytes === 'string' ? Buffer.from(logBytes, 'base64').toString() : '');
    if (this.phase === 'over') return;
    this.settleFinished(undefined);
    const failure = this.failure();
    const verdict = this.decide({ kind: 'closed', failure });
    this.phase = 'over';
    if (verdict !== 'committed') return;
    if (!failure) {
      // The stream closed without a CallFinished.
      if (this.head) {
        this.handOn(true);
        this.body?.end();
      } else this.answer?.reject(remoteError(502, `runner ${this.channel.address} ended the call without an answer`));
      return;
    }
    const lost = remoteError(502, `runner ${this.channel.address} failed during the call: ${failure.details}`);
    this.answer?.reject(lost);
    this.body?.destroy(lost);
  }

  /** Why the stream ended, when it ended without a CallFinished; undefined: it ended OK. */
  private failure(): Failure | undefined {
    if (this.broken) return this.broken;
    if (this.end) return this.end.code !== GrpcStatus.OK ? { code: this.end.code, details: this.end.details } : undefined;
    // Reset before any answer (a refused stream, a connection the runner dropped or could not speak): nothing reached it.
    const code = this.accepted && this.stream.rstCode !== h2.NGHTTP2_REFUSED_STREAM ? GrpcStatus.INTERNAL : GrpcStatus.UNAVAILABLE;
    return { code, details: `stream reset by the runner (code ${this.stream.rstCode})` };
  }

  /** Gives up: the runner is told (the stream is cancelled); `code` is how the stream counts as ended. */
  private cancel(code: number = GrpcStatus.CANCELLED, details = 'Cancelled on client'): void {
    this.broken ??= { code, details };
    if (!this.stream.closed) this.stream.close(h2.NGHTTP2_CANCEL);
  }
}

/** `host:port` names this machine (models' isLoopbackHost): nothing sent to it crosses a network. */
export function loopbackAddress(address: string): boolean {
  try {
    return isLoopbackHost(new URL(`http://${address}`).hostname);
  } catch {
    return false;
  }
}
