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
import { remoteError, type Call } from '../models/index.js';
import { DRAINING_HEADER, LOG_EXTENSION, LOG_TRAILER, MAKE_ROOM_EXTENSION, MAX_FRAME_BYTES, roomFromRefusal, wireCallJson, type CallFinishedMsg, type RunnerMsg, type RunnerStatusMsg } from './runner-protocol.js';
import { decodeRunnerMsg, decodeRunnerStatus, encodeClientMsg, encodeEmpty, ENGAGE_PATH, GrpcStatus, grpcMessage, grpcTimeout, loadWire, MAX_MESSAGE_BYTES, MessageReader, STATUS_PATH } from './wire.js';
import { H2Channel, type ChannelTls } from './channel.js';

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
}

export function engageRequest(call: Call, body: Buffer, metadata: Record<string, string> = {}): EngageRequest {
  const frames: Buffer[] = [];
  let at = 0;
  do {
    const end = Math.min(body.length, at + MAX_FRAME_BYTES);
    frames.push(encodeClientMsg({ data: { data: body.subarray(at, end), eof: end === body.length } }));
    at = end;
  } while (at < body.length);
  return { call, callJson: JSON.stringify(wireCallJson(call)), bodyFrames: frames.length === 1 ? frames[0]! : Buffer.concat(frames), metadata };
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

/** A gRPC call's outcome from its trailers (or a trailers-only answer's headers). */
interface GrpcEnd {
  readonly code: number;
  readonly details: string;
  readonly headers: IncomingHttpHeaders;
}

function grpcEnd(headers: IncomingHttpHeaders): GrpcEnd | undefined {
  const status = headers['grpc-status'];
  if (status === undefined) return undefined;
  return { code: Number(status), details: grpcMessage(headers['grpc-message']), headers };
}

/** Request headers of a gRPC call on `path`, with `metadata`, due within `timeoutMs`. */
function grpcHeaders(path: string, metadata: Record<string, string>, timeoutMs: number): Record<string, string> {
  return {
    ...metadata,
    [h2.HTTP2_HEADER_METHOD]: 'POST',
    [h2.HTTP2_HEADER_PATH]: path,
    [h2.HTTP2_HEADER_CONTENT_TYPE]: 'application/grpc',
    te: 'trailers',
    'grpc-timeout': grpcTimeout(timeoutMs),
    'user-agent': 'fnts-lb',
  };
}

export class RunnerClient {
  private readonly channel: H2Channel;
  private readonly graceMs: number;

  constructor(
    readonly address: string,
    options: RunnerClientOptions = {},
  ) {
    // Room for a call's log in the trailers (FN_MAX_LOG_SIZE_BYTES, 1 MiB by default, base64).
    this.channel = new H2Channel(address, { tls: options.tls, maxHeaderListBytes: 4 * 1024 * 1024 });
    this.graceMs = options.graceMs ?? 10_000;
    // The proto is read now, not on the first call.
    loadWire();
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

  /** Tries to run a call on this runner (see Attempt). Never rejects. */
  engage(request: EngageRequest, options: EngageOptions = {}): Promise<Attempt> {
    const { call } = request;
    const timeoutMs = call.fn.timeoutS * 1000 + this.graceMs;
    let stream: ClientHttp2Stream;
    try {
      stream = this.channel.request(grpcHeaders(ENGAGE_PATH, request.metadata, timeoutMs));
    } catch (err) {
      return Promise.resolve({ kind: 'failed', reason: err instanceof Error ? err.message : String(err) });
    }
    return new Promise<Attempt>((resolve) => {
      let accepted = false;
      /** The runner's response headers said it drains (fnts runners, on refusals). */
      let drains = false;
      let decided = false;
      /** A CallFinished arrived, or the stream is over. */
      let ended = false;
      let resultStart: { status: number; headers: RawHeaders } | undefined;
      let bodyOut: PassThrough | undefined;
      let settleResponse: ((r: CallResponse) => void) | undefined;
      let failResponse: ((err: unknown) => void) | undefined;
      let settleFinished: (f: CallFinishedMsg | undefined) => void = () => undefined;
      const finished = new Promise<CallFinishedMsg | undefined>((r) => (settleFinished = r));
      let settleLog: (log: string) => void = () => undefined;
      const log = new Promise<string>((r) => (settleLog = r));
      /** How the gRPC call ended: its trailers, or what we made of a broken stream. */
      let end: GrpcEnd | undefined;
      let broken: { code: number; details: string } | undefined;
      const reader = new MessageReader(MAX_MESSAGE_BYTES);
      const cancel = (code: number = GrpcStatus.CANCELLED, details = 'Cancelled on client'): void => {
        broken ??= { code, details };
        if (!stream.closed) stream.close(h2.NGHTTP2_CANCEL);
      };
      const deadline = setTimeout(() => cancel(GrpcStatus.DEADLINE_EXCEEDED, 'Deadline exceeded'), timeoutMs);
      deadline.unref();

      const commit = (): void => {
        if (decided) return;
        decided = true;
        const response = new Promise<CallResponse>((res, rej) => ((settleResponse = res), (failResponse = rej)));
        response.catch(() => undefined);
        resolve({ kind: 'committed', response, finished, log, cancel: () => cancel() });
      };
      /** Data that came after the result start and before the answer was handed on (a whole answer comes in one read). */
      let early: Buffer[] = [];
      /**
       * Hands the answer on: with `whole`, the body is every frame that came
       * (the runner sent the whole answer, CallFinished included, at once),
       * else a stream the frames still to come go to.
       */
      const answer = (whole: boolean): void => {
        if (!resultStart || !settleResponse) return;
        const mapped = call.triggerId !== undefined ? triggerAnswer(resultStart.status, resultStart.headers) : resultStart;
        const settle = settleResponse;
        settleResponse = undefined;
        if (whole) {
          settle({ status: mapped.status, headers: mapped.headers, body: early.length === 1 ? early[0]! : Buffer.concat(early) });
          early = [];
          return;
        }
        bodyOut = new PassThrough();
        // The caller left or the answer was dropped: the runner is told.
        bodyOut.once('close', () => {
          if (!ended) cancel();
        });
        for (const b of early) bodyOut.write(b);
        early = [];
        settle({ status: mapped.status, headers: mapped.headers, body: bodyOut });
      };
      const onMessage = (msg: RunnerMsg): void => {
        if (ended) return;
        if (msg.result_start) {
          const http = msg.result_start.http;
          const headers: RawHeaders = [];
          for (const h of http?.headers ?? []) headers.push(h.key, h.value);
          resultStart = { status: http?.status_code || 200, headers };
          commit();
        } else if (msg.data) {
          // Data before a result start: Fn's runner writes 200 then.
          if (!resultStart) {
            resultStart = { status: 200, headers: [] };
            commit();
          }
          if (msg.data.data.length === 0) return;
          if (!bodyOut) early.push(msg.data.data);
          else if (!bodyOut.write(msg.data.data)) {
            stream.pause();
            bodyOut.once('drain', () => stream.resume());
          }
        } else if (msg.finished) {
          const f = msg.finished;
          ended = true;
          settleFinished(f);
          if (!decided && !resultStart && !f.success && f.errorCode === 503 && f.startedAt === '') {
            decided = true;
            if (drains) this.channel.markDraining(stream.session);
            resolve({ kind: 'refused', reason: f.errorStr || 'runner too busy', roomMs: roomFromRefusal(f) });
            return;
          }
          commit();
          if (resultStart || f.success) {
            // A success without a result start: Fn's runner answered 200 with no body.
            resultStart ??= { status: 200, headers: [] };
            answer(true);
            bodyOut?.end();
          } else {
            failResponse?.(remoteError(f.errorCode || 500, f.errorStr || 'Unknown Error From Pure Runner', f.errorUser));
          }
        }
      };

      stream.on('response', (headers) => {
        // A trailers-only answer is an error before anything was accepted.
        end = grpcEnd(headers);
        if (end) return;
        const status = Number(headers[h2.HTTP2_HEADER_STATUS]);
        if (status !== 200) broken = { code: status === 503 || status === 502 || status === 504 ? GrpcStatus.UNAVAILABLE : GrpcStatus.UNKNOWN, details: `the runner answered HTTP ${status}` };
        else accepted = true;
        drains = headers[DRAINING_HEADER] === '1';
      });
      stream.on('data', (chunk: Buffer) => {
        try {
          for (const bytes of reader.push(chunk)) onMessage(decodeRunnerMsg(bytes));
        } catch (err) {
          cancel(GrpcStatus.INTERNAL, `a bad message from the runner: ${err instanceof Error ? err.message : String(err)}`);
          return;
        }
        // The answer began and its end is not in this read: it streams.
        if (resultStart && !ended) answer(false);
      });
      stream.on('trailers', (headers) => {
        end = grpcEnd(headers) ?? { code: GrpcStatus.UNKNOWN, details: 'trailers without a grpc-status', headers };
      });
      stream.on('error', (err: Error & { code?: string }) => {
        // A connection that failed or went away before the runner answered: nothing reached it.
        broken ??= { code: GrpcStatus.UNAVAILABLE, details: err.message };
      });
      stream.on('close', () => {
        clearTimeout(deadline);
        const logBytes = end?.headers[LOG_TRAILER];
        settleLog(typeof logBytes === 'string' ? Buffer.from(logBytes, 'base64').toString() : '');
        if (ended) return;
        ended = true;
        settleFinished(undefined);
        const failure =
          broken ??
          (end && end.code !== GrpcStatus.OK ? { code: end.code, details: end.details } : undefined) ??
          (end
            ? undefined
            : // Reset before any answer (a refused stream, a connection the runner dropped or could not speak): nothing reached it.
              { code: accepted && stream.rstCode !== h2.NGHTTP2_REFUSED_STREAM ? GrpcStatus.INTERNAL : GrpcStatus.UNAVAILABLE, details: `stream reset by the runner (code ${stream.rstCode})` });
        if (!failure) {
          // The stream closed without a CallFinished.
          commit();
          if (resultStart) {
            answer(true);
            bodyOut?.end();
          } else failResponse?.(remoteError(502, `runner ${this.address} ended the call without an answer`));
          return;
        }
        const neverArrived = failure.code === GrpcStatus.UNAVAILABLE || failure.code === GrpcStatus.DEADLINE_EXCEEDED || failure.code === GrpcStatus.CANCELLED;
        if (!decided && !accepted && neverArrived) {
          decided = true;
          resolve({ kind: 'failed', reason: failure.details });
          return;
        }
        commit();
        const lost = remoteError(502, `runner ${this.address} failed during the call: ${failure.details}`);
        failResponse?.(lost);
        bodyOut?.destroy(lost);
      });
      stream.end(requestBytes(request, options));
    });
  }

  /** The runner's RunnerStatus (calls in flight, received, handled). */
  status(timeoutMs = 2000): Promise<RunnerStatusMsg> {
    return new Promise((resolve, reject) => {
      let stream: ClientHttp2Stream;
      try {
        stream = this.channel.request(grpcHeaders(STATUS_PATH, {}, timeoutMs));
      } catch (err) {
        reject(err);
        return;
      }
      const timer = setTimeout(() => stream.close(h2.NGHTTP2_CANCEL), timeoutMs);
      const reader = new MessageReader(MAX_MESSAGE_BYTES);
      let status: RunnerStatusMsg | undefined;
      let end: GrpcEnd | undefined;
      let error: Error | undefined;
      stream.on('response', (headers) => (end = grpcEnd(headers)));
      stream.on('data', (chunk: Buffer) => {
        try {
          for (const bytes of reader.push(chunk)) status = decodeRunnerStatus(bytes);
        } catch (err) {
          error = err instanceof Error ? err : new Error(String(err));
        }
      });
      stream.on('trailers', (headers) => (end = grpcEnd(headers)));
      stream.on('error', (err: Error) => (error ??= err));
      stream.on('close', () => {
        clearTimeout(timer);
        if (status && end?.code === GrpcStatus.OK) resolve(status);
        else reject(error ?? new Error(end ? `runner status failed: ${end.details || `gRPC status ${end.code}`}` : `no status from ${this.address} within ${timeoutMs} ms`));
      });
      stream.end(encodeEmpty());
    });
  }

  close(): void {
    this.channel.close();
  }
}
