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
import { PassThrough } from 'node:stream';
import * as grpc from '@grpc/grpc-js';
import type { CallResponse, RawHeaders } from '../agent/index.js';
import { triggerAnswer } from '../agent/protocol/trigger.js';
import { remoteError, type Call } from '../models/index.js';
import { LOG_EXTENSION, LOG_TRAILER, MAX_FRAME_BYTES, runnerProtocol, wireCallJson, type CallFinishedMsg, type EngageClientStream, type RunnerMsg, type RunnerProtocolClient, type RunnerStatusMsg } from '../runner/index.js';

export type Attempt =
  | { readonly kind: 'refused'; readonly reason: string }
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
  /** TLS to the runner; plaintext when absent. */
  readonly credentials?: grpc.ChannelCredentials;
  /** Added to each call's timeout for the stream's deadline (the runner enforces the timeout itself). */
  readonly graceMs?: number;
}

/** gRPC errors that mean the request never reached a runner. */
function neverArrived(err: grpc.ServiceError): boolean {
  return err.code === grpc.status.UNAVAILABLE || err.code === grpc.status.DEADLINE_EXCEEDED || err.code === grpc.status.CANCELLED;
}

/** The TryCall and the body, the body in frames (an empty body is one empty frame with eof). */
function writeRequest(stream: EngageClientStream, call: Call, body: Buffer, wantLog: boolean): void {
  stream.write({ try: { models_call_json: JSON.stringify(wireCallJson(call)), slot_hash_id: '', extensions: wantLog ? { [LOG_EXTENSION]: '1' } : {} } });
  let at = 0;
  do {
    const end = Math.min(body.length, at + MAX_FRAME_BYTES);
    stream.write({ data: { data: body.subarray(at, end), eof: end === body.length } });
    at = end;
  } while (at < body.length);
  stream.end();
}

export class RunnerClient {
  private readonly client: RunnerProtocolClient;
  private readonly graceMs: number;

  constructor(
    readonly address: string,
    options: RunnerClientOptions = {},
  ) {
    const { Client } = runnerProtocol();
    this.client = new Client(address, options.credentials ?? grpc.credentials.createInsecure(), {
      // A runner that went away is found within seconds, not at the next call's failure.
      'grpc.keepalive_time_ms': 10_000,
      'grpc.keepalive_timeout_ms': 5_000,
      'grpc.keepalive_permit_without_calls': 1,
      // While a runner is unreachable the channel redials it by itself and
      // the LB places nothing on it (LbAgent's `up`): this ceiling is how
      // long a restarted runner may wait to be dialed again, one failed
      // connect a second at most while it stays down.
      'grpc.initial_reconnect_backoff_ms': 100,
      'grpc.max_reconnect_backoff_ms': 1_000,
      'grpc.max_receive_message_length': 8 * 1024 * 1024,
      // Room for a call's log in the trailers (FN_MAX_LOG_SIZE_BYTES, 1 MiB by default).
      'grpc.max_metadata_size': 4 * 1024 * 1024,
    });
    this.graceMs = options.graceMs ?? 10_000;
  }

  /** True when the channel is connected or may be (not in a failure backoff). */
  get reachable(): boolean {
    return this.client.getChannel().getConnectivityState(false) !== grpc.connectivityState.TRANSIENT_FAILURE;
  }

  /** Tries to run `call` on this runner (see Attempt); `wantLog`: ask for the call's log. Never rejects. */
  engage(call: Call, body: Buffer, metadata: grpc.Metadata = new grpc.Metadata(), wantLog = false): Promise<Attempt> {
    const stream = this.client.Engage(metadata, { deadline: Date.now() + call.fn.timeoutS * 1000 + this.graceMs });
    return new Promise<Attempt>((resolve) => {
      let accepted = false;
      let decided = false;
      let resultStart: { status: number; headers: RawHeaders } | undefined;
      let bodyOut: PassThrough | undefined;
      let settleResponse: ((r: CallResponse) => void) | undefined;
      let failResponse: ((err: unknown) => void) | undefined;
      let settleFinished: (f: CallFinishedMsg | undefined) => void = () => undefined;
      const finished = new Promise<CallFinishedMsg | undefined>((r) => (settleFinished = r));
      let settleLog: (log: string) => void = () => undefined;
      const log = new Promise<string>((r) => (settleLog = r));
      stream.on('status', (status: grpc.StatusObject) => {
        const bytes = status.metadata.get(LOG_TRAILER)[0];
        settleLog(Buffer.isBuffer(bytes) ? bytes.toString() : '');
      });

      const commit = (): void => {
        if (decided) return;
        decided = true;
        const response = new Promise<CallResponse>((res, rej) => ((settleResponse = res), (failResponse = rej)));
        response.catch(() => undefined);
        resolve({ kind: 'committed', response, finished, log, cancel: () => stream.cancel() });
      };
      const answer = (): void => {
        if (!resultStart || !settleResponse) return;
        bodyOut = new PassThrough();
        // The caller left or the answer was dropped: the runner is told.
        bodyOut.once('close', () => {
          if (!ended) stream.cancel();
        });
        const mapped = call.triggerId !== undefined ? triggerAnswer(resultStart.status, resultStart.headers) : resultStart;
        settleResponse({ status: mapped.status, headers: mapped.headers, body: bodyOut });
        settleResponse = undefined;
      };
      let ended = false;

      stream.on('metadata', () => {
        accepted = true;
      });
      stream.on('data', (msg: RunnerMsg) => {
        if (msg.result_start) {
          const http = msg.result_start.http;
          const headers: RawHeaders = [];
          for (const h of http?.headers ?? []) headers.push(h.key, h.value);
          resultStart = { status: http?.status_code || 200, headers };
          commit();
          answer();
        } else if (msg.data) {
          if (!bodyOut) {
            // Data before a result start: Fn's runner writes 200 then.
            resultStart ??= { status: 200, headers: [] };
            commit();
            answer();
          }
          if (bodyOut && msg.data.data.length > 0 && !bodyOut.write(msg.data.data)) {
            stream.pause();
            bodyOut.once('drain', () => stream.resume());
          }
        } else if (msg.finished) {
          const f = msg.finished;
          ended = true;
          if (!decided && !resultStart && !f.success && f.errorCode === 503 && f.startedAt === '') {
            decided = true;
            resolve({ kind: 'refused', reason: f.errorStr || 'runner too busy' });
            settleFinished(f);
            return;
          }
          commit();
          if (resultStart || f.success) {
            // A success without a result start: Fn's runner answered 200 with no body.
            resultStart ??= { status: 200, headers: [] };
            answer();
            bodyOut?.end();
          } else {
            failResponse?.(remoteError(f.errorCode || 500, f.errorStr || 'Unknown Error From Pure Runner', f.errorUser));
          }
          settleFinished(f);
        }
      });
      stream.on('error', (err: grpc.ServiceError) => {
        ended = true;
        if (!decided && !accepted && neverArrived(err)) {
          decided = true;
          resolve({ kind: 'failed', reason: err.details || err.message });
        } else {
          commit();
          const lost = remoteError(502, `runner ${this.address} failed during the call: ${err.details || err.message}`);
          failResponse?.(lost);
          bodyOut?.destroy(lost);
        }
        settleFinished(undefined);
        settleLog('');
      });
      stream.on('end', () => {
        if (ended) return;
        ended = true;
        // The stream closed without a CallFinished.
        commit();
        if (resultStart) bodyOut?.end();
        else failResponse?.(remoteError(502, `runner ${this.address} ended the call without an answer`));
        settleFinished(undefined);
      });
      writeRequest(stream, call, body, wantLog);
    });
  }

  /** The runner's RunnerStatus (calls in flight, received, handled). */
  status(timeoutMs = 2000): Promise<RunnerStatusMsg> {
    return new Promise((resolve, reject) => {
      this.client.Status({}, new grpc.Metadata(), { deadline: Date.now() + timeoutMs }, (err, status) => (err || !status ? reject(err ?? new Error('no status')) : resolve(status)));
    });
  }

  close(): void {
    this.client.close();
  }
}
