/**
 * The pure runner: a gRPC RunnerProtocol server in front of the local agent
 * (FN_NODE_TYPE=pure-runner). An LB engages it once per call:
 *
 *   LB -> TryCall(models_call_json) -> DataFrames (the body, the last with eof)
 *   runner: response headers (the call is now committed), then the agent runs it
 *   runner -> CallResultStart(status, headers) -> DataFrames -> CallFinished(timings)
 *
 * A call the runner cannot take (no memory for another container right now:
 * the agent's non-blocking tracker says so, or the runner is draining) is
 * refused with CallFinished{errorCode 503} before anything ran, which Fn's
 * LB and fnts's place on another runner. A call that failed is reported in
 * CallFinished with Fn's status and words and `errorUser` when the function
 * caused it.
 *
 * The runner sends its response headers as soon as it has accepted a
 * TryCall, before the agent starts the call: an LB that saw no headers knows
 * the call never ran and may resend it elsewhere.
 */
import * as grpc from '@grpc/grpc-js';
import { bindServer, shutdownServer } from './grpc.js';
import type { Logger } from 'pino';
import { sameName, type CallResponse, type Invoker } from '../agent/index.js';
import { encodeTriggerAnswer, undecorateTrigger } from '../agent/protocol/trigger.js';
import { ApiError, callFromJson, E, type Call } from '../models/index.js';
import {
  finishedMessage,
  LOG_EXTENSION,
  LOG_TRAILER,
  MAKE_ROOM_EXTENSION,
  MAX_FRAME_BYTES,
  refusalMessage,
  runnerProtocol,
  type ClientMsg,
  type EngageServerStream,
  type RunnerMsg,
  type RunnerStatusMsg,
  type TryCallMsg,
} from './protocol.js';

export interface RunnerServerOptions {
  /** Runs the calls: the local agent (with non-blocking resources, so that a full runner refuses rather than queues). */
  readonly invoker: Invoker;
  readonly log: Logger;
  /** FN_MAX_REQUEST_SIZE (0 = no limit): a bigger body is refused with 413. */
  readonly maxRequestBytes: number;
  /** TLS for the gRPC port; plaintext when absent. */
  readonly credentials?: grpc.ServerCredentials;
  /** Told of each engagement's result (metrics). Must be cheap and must not throw. */
  readonly events?: { onEngagement(result: 'handled' | 'refused'): void };
}

/**
 * What an LB sends on an engagement: its TryCall first, then the body's
 * frames until the one with eof. One listener reads both, so no frame is
 * missed between them. Both promises are handled at once (the body's may
 * never be awaited, when the call is refused).
 */
function inbound(stream: EngageServerStream, limit: number): { readonly json: Promise<TryCallMsg>; readonly body: Promise<Buffer> } {
  let gotTry: (msg: TryCallMsg) => void;
  let noTry: (err: unknown) => void;
  let gotBody: (body: Buffer) => void;
  let noBody: (err: unknown) => void;
  const json = new Promise<TryCallMsg>((resolve, reject) => ((gotTry = resolve), (noTry = reject)));
  const body = new Promise<Buffer>((resolve, reject) => ((gotBody = resolve), (noBody = reject)));
  json.catch(() => undefined);
  body.catch(() => undefined);
  const chunks: Buffer[] = [];
  let size = 0;
  let tried = false;
  const cleanup = (): void => {
    stream.off('data', onData);
    stream.off('end', onEnd);
    stream.off('error', onEnd);
  };
  const onData = (msg: ClientMsg): void => {
    if (!tried) {
      tried = true;
      if (msg.try) gotTry(msg.try);
      else {
        cleanup();
        noTry(new ApiError(E.InvalidJSON, { message: 'Invalid call: the first message of an engagement must be a TryCall' }));
      }
      return;
    }
    if (!msg.data) return;
    chunks.push(msg.data.data);
    size += msg.data.data.length;
    if (limit > 0 && size > limit) {
      cleanup();
      noBody(new ApiError(E.RequestContentTooBig));
    } else if (msg.data.eof) {
      cleanup();
      gotBody(chunks.length === 1 ? chunks[0]! : Buffer.concat(chunks, size));
    }
  };
  const onEnd = (): void => {
    cleanup();
    const gone = new ApiError(E.ClientCancelled, { message: 'the LB ended the stream before the end of the request' });
    noTry(gone);
    noBody(gone);
  };
  stream.on('data', onData);
  stream.once('end', onEnd);
  stream.once('error', onEnd);
  return { json, body };
}

/** Writes `msg`, resolving once the stream takes more (backpressure for response frames). */
function send(stream: EngageServerStream, msg: RunnerMsg): Promise<void> | undefined {
  if (stream.destroyed || stream.writableEnded) return undefined;
  if (stream.write(msg)) return undefined;
  return new Promise<void>((resolve) => {
    const done = (): void => {
      stream.off('drain', done);
      stream.off('close', done);
      resolve();
    };
    stream.once('drain', done);
    stream.once('close', done);
  });
}

/**
 * The caller's W3C trace context from the stream's metadata (an fnts LB
 * sends it there) when the call's own headers carry none, so the agent's
 * spans continue the caller's trace.
 */
function withTraceContext(call: Call, metadata: grpc.Metadata): Call {
  const traceparent = metadata.get('traceparent')[0];
  if (typeof traceparent !== 'string' || call.headers.some((h, i) => i % 2 === 0 && sameName(h, 'traceparent'))) return call;
  const tracestate = metadata.get('tracestate')[0];
  return { ...call, headers: [...call.headers, 'traceparent', traceparent, ...(typeof tracestate === 'string' ? ['tracestate', tracestate] : [])] };
}

export class RunnerServer {
  private readonly server = new grpc.Server({ 'grpc.max_receive_message_length': 8 * 1024 * 1024 });
  private readonly log: Logger;
  private active = 0;
  private received = 0;
  private handled = 0;
  private draining = false;
  private idle: (() => void) | undefined;
  private readonly streams = new Set<EngageServerStream>();

  constructor(private readonly o: RunnerServerOptions) {
    this.log = o.log.child({ module: 'runner' });
    this.server.addService(runnerProtocol().service, {
      Engage: (stream: EngageServerStream) => this.engage(stream),
      Status: (_call: unknown, callback: grpc.sendUnaryData<RunnerStatusMsg>) => callback(null, this.status()),
      Status2: (_call: unknown, callback: grpc.sendUnaryData<RunnerStatusMsg>) => callback(null, this.status()),
      ConfigureRunner: (_call: unknown, callback: grpc.sendUnaryData<object>) => callback(null, {}),
      StreamLogs: (stream: grpc.ServerDuplexStream<unknown, unknown>) => {
        stream.emit('error', { code: grpc.status.UNIMPLEMENTED, details: 'this runner streams no logs: call logs are in the call records' });
      },
    });
  }

  /** Binds the gRPC port (0: any free port) and answers with the port bound. */
  listen(host: string, port: number): Promise<number> {
    return bindServer(this.server, host, port, this.o.credentials);
  }

  /** Calls in flight, and calls received and handled (not refused) since start: RunnerStatus. */
  status(): RunnerStatusMsg {
    return {
      active: this.active,
      failed: false,
      id: '',
      details: this.draining ? 'draining' : '',
      errorCode: 0,
      errorStr: '',
      createdAt: '',
      startedAt: '',
      completedAt: '',
      cached: false,
      requestsReceived: this.received,
      requestsHandled: this.handled,
      kdumpsOnDisk: 0,
      schedulerDuration: 0,
      executionDuration: 0,
      isNetworkDisabled: false,
      customStatus: this.draining ? { draining: 'true' } : {},
      imagePullWaitDuration: 0,
      ctrPrepDuration: 0,
      ctrCreateDuration: 0,
      initStartTime: 0,
    };
  }

  /**
   * Refuses new calls (503, so LBs place them elsewhere) and resolves once
   * the calls in flight have finished. The port stays open meanwhile, so
   * LBs hear the refusals rather than connection errors.
   */
  async drain(): Promise<void> {
    if (!this.draining) {
      this.draining = true;
      this.log.info({ active: this.active }, 'draining: new calls are refused, calls in flight finish');
    }
    if (this.active > 0) await new Promise<void>((resolve) => (this.idle = resolve));
  }

  /** Stops serving: streams still open are cut. Idempotent. */
  async close(): Promise<void> {
    this.draining = true;
    await shutdownServer(this.server, 1000, () => {
      for (const s of this.streams) s.cancelled || s.end();
    });
  }

  private engage(stream: EngageServerStream): void {
    this.received++;
    this.active++;
    this.streams.add(stream);
    this.serve(stream)
      .catch((err: unknown) => this.log.warn({ err }, 'engagement failed'))
      .finally(() => {
        this.streams.delete(stream);
        if (--this.active === 0) this.idle?.();
      });
  }

  private async serve(stream: EngageServerStream): Promise<void> {
    const request = inbound(stream, this.o.maxRequestBytes);
    let tried: TryCallMsg;
    try {
      tried = await request.json;
    } catch (err) {
      // No TryCall: nothing to answer with a CallFinished.
      stream.emit('error', { code: grpc.status.INVALID_ARGUMENT, details: err instanceof Error ? err.message : String(err) });
      return;
    }
    let call: Call;
    try {
      call = withTraceContext(this.wireCall(tried.models_call_json), stream.metadata);
    } catch (err) {
      const e = err instanceof ApiError ? err : new ApiError(E.InvalidJSON);
      this.finish(stream, refusalMessage('', e.status, e.message));
      this.counted('handled');
      return;
    }
    if (this.draining) {
      this.counted('refused');
      this.finish(stream, refusalMessage(call.id, 503, E.CallTimeoutServerBusy.message));
      return;
    }
    // Accepted: from these headers on, the LB treats the call as committed.
    stream.sendMetadata(new grpc.Metadata());
    let body: Buffer;
    try {
      body = await request.body;
    } catch (err) {
      const e = err instanceof ApiError ? err : new ApiError(E.ClientCancelled);
      this.finish(stream, refusalMessage(call.id, e.status, e.message));
      this.counted('handled');
      return;
    }
    // The LB says the call has waited and this runner is its first choice.
    if (tried.extensions[MAKE_ROOM_EXTENSION] === '1') this.o.invoker.makeRoom?.(call);
    const running = this.o.invoker.invoke(call, body.length === 0 ? null : body);
    // An fnts LB that keeps records asks for the call's log (read only then: reading it keeps it).
    const log = (): Promise<string> | undefined => (tried.extensions[LOG_EXTENSION] === '1' ? running.log : undefined);
    // The LB gave up on the call (its caller left, or it is stopping).
    const onCancel = (): void => running.cancel();
    stream.once('cancelled', onCancel);
    try {
      let response: CallResponse;
      try {
        response = await running.response;
      } catch (err) {
        const outcome = await running.outcome;
        if (outcome.startedAt === undefined && outcome.httpStatus === 503) {
          // Never ran: the LB may place it elsewhere.
          this.counted('refused');
          this.finish(stream, refusalMessage(call.id, 503, err instanceof Error ? err.message : String(err)));
          return;
        }
        this.counted('handled');
        this.finish(stream, finishedMessage(outcome, call.fn.image, false), log());
        return;
      }
      this.counted('handled');
      const answer = call.triggerId !== undefined ? encodeTriggerAnswer(response.status, response.headers) : response;
      const headers = [];
      for (let i = 0; i + 1 < answer.headers.length; i += 2) headers.push({ key: answer.headers[i]!, value: answer.headers[i + 1]! });
      await send(stream, { result_start: { http: { status_code: answer.status, headers } } });
      await this.sendBody(stream, response.body);
      this.finish(stream, finishedMessage(await running.outcome, call.fn.image, true), log());
    } finally {
      stream.off('cancelled', onCancel);
    }
  }

  /** A call from models_call_json; a trigger call's decorated request made the caller's again (the agent decorates it for the function). */
  private wireCall(json: string): Call {
    let parsed: unknown;
    try {
      parsed = JSON.parse(json);
    } catch {
      throw new ApiError(E.InvalidJSON, { message: 'Invalid call: models_call_json is not JSON' });
    }
    const call = callFromJson(parsed);
    if (call.triggerId === undefined) return call;
    const caller = undecorateTrigger(call.headers);
    // Headers not in the trigger form: the function gets them as they came.
    if (!caller) return { ...call, triggerId: undefined };
    return { ...call, method: caller.method, url: caller.url || call.url, headers: caller.headers };
  }

  /** The answer's body as DataFrames of at most MAX_FRAME_BYTES, whether it came whole or streamed. */
  private async sendBody(stream: EngageServerStream, body: CallResponse['body']): Promise<void> {
    try {
      for await (const chunk of Buffer.isBuffer(body) ? [body] : body) {
        const c = chunk as Buffer;
        for (let at = 0; at < c.length; at += MAX_FRAME_BYTES) await send(stream, { data: { data: c.subarray(at, at + MAX_FRAME_BYTES), eof: false } });
        if (stream.destroyed) break;
      }
    } finally {
      if (!Buffer.isBuffer(body) && !body.destroyed) body.destroy();
    }
  }

  private counted(result: 'handled' | 'refused'): void {
    if (result === 'handled') this.handled++;
    try {
      this.o.events?.onEngagement(result);
    } catch (err) {
      this.log.error({ err }, 'an engagement listener threw; it is skipped');
    }
  }

  /**
   * Sends CallFinished and ends the stream; with `log` (an fnts LB asked for
   * it in TryCall.extensions), the call's log goes in the trailers once the
   * container has moved on. The LB's caller has its answer already.
   */
  private finish(stream: EngageServerStream, finished: RunnerMsg['finished'], log?: Promise<string>): void {
    if (stream.destroyed || stream.writableEnded) return;
    stream.write({ finished });
    if (!log) {
      stream.end();
      return;
    }
    log.then(
      (text) => {
        const trailers = new grpc.Metadata();
        if (text !== '') trailers.set(LOG_TRAILER, Buffer.from(text));
        if (!stream.destroyed && !stream.writableEnded) stream.end(trailers);
      },
      () => stream.end(),
    );
  }
}
