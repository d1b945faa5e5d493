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
 * the call never ran and may resend it elsewhere. A whole answer (the
 * function's body came in full) goes out in one write, CallFinished
 * included, so the LB reads it at once and answers its caller with the
 * body's length.
 */
import type { Readable } from 'node:stream';
import type { Logger } from 'pino';
import type { RunnerSecrets } from './secrets.js';
import { sameName, type CallResponse, type Invoker, encodeTriggerAnswer, undecorateTrigger } from '../call/index.js';
import { ApiError, callFromJson, E, FnInterner, tellEach, type Call } from '../models/index.js';
import {
  asBuffer,
  GrpcH2Server,
  unary,
  type GrpcServerCall,
  type ServerTls,
  DRAINING_HEADER,
  finishedMessage,
  LOG_EXTENSION,
  LOG_TRAILER,
  MAKE_ROOM_EXTENSION,
  MAX_FRAME_BYTES,
  refusalMessage,
  runnerStatusMessage,
  takeSecrets,
  type CallFinishedMsg,
  type RunnerStatusMsg,
  type TryCallMsg,
  CONFIGURE_PATH,
  decodeClientMsg,
  encodeEmpty,
  encodeRunnerMsg,
  encodeRunnerStatus,
  ENGAGE_PATH,
  GrpcStatus,
  MAX_MESSAGE_BYTES,
  STATUS2_PATH,
  STATUS_PATH,
} from '../rpc/index.js';

export interface RunnerServerOptions {
  /** Runs the calls: the local agent (with non-blocking resources, so that a full runner refuses rather than queues). */
  readonly invoker: Invoker;
  readonly log: Logger;
  /** FN_MAX_REQUEST_SIZE (0 = no limit): a bigger body is refused with 413. */
  readonly maxRequestBytes: number;
  /** Mutual TLS for the gRPC port; plaintext when absent. */
  readonly tls?: ServerTls;
  /** Told of each engagement's result (metrics). Must be cheap and must not throw (one that does is logged and skipped). */
  readonly events?: { onEngagement(result: 'handled' | 'refused'): void };
  /**
   * Where the secrets calls bring (an fnts LB's SECRETS_FIELD) are held
   * for the agent's containers (runner/secrets.ts; the agent's SecretSource).
   * Without: they are dropped, and containers get none.
   */
  readonly secrets?: RunnerSecrets;
}

/**
 * What an LB sends on an engagement: its TryCall first, then the body's
 * frames until the one with eof. One listener reads both, so no frame is
 * missed between them. Both promises are handled at once (the body's may
 * never be awaited, when the call is refused).
 */
function inbound(call: GrpcServerCall, limit: number): { readonly json: Promise<TryCallMsg>; readonly body: Promise<Buffer> } {
  let gotTry: (msg: TryCallMsg) => void;
  let noTry: (err: unknown) => void;
  let gotBody: (body: Buffer) => void;
  let noBody: (err: unknown) => void;
  const json = new Promise<TryCallMsg>((resolve, reject) => ((gotTry = resolve), (noTry = reject)));
  const body = new Promise<Buffer>((resolve, reject) => ((gotBody = resolve), (noBody = reject)));
  json.catch(() => undefined);
  body.catch(() => undefined);
  const chunks: Uint8Array[] = [];
  let size = 0;
  let tried = false;
  let done = false;
  /** The engagement ends before its body: neither promise will be kept. */
  const stop = (err: ApiError): void => {
    done = true;
    noTry(err);
    noBody(err);
  };
  const gone = (): void => {
    if (!done) stop(new ApiError(E.ClientCancelled, { message: 'the LB ended the stream before the end of the request' }));
  };
  call.receive((bytes) => {
    if (done) return;
    let msg;
    try {
      msg = decodeClientMsg(bytes);
    } catch {
      stop(new ApiError(E.InvalidJSON, { message: 'Invalid call: a message of the engagement is not a ClientMsg' }));
      return;
    }
    if (!tried) {
      tried = true;
      if (msg.try) gotTry(msg.try);
      else {
        done = true;
        noTry(new ApiError(E.InvalidJSON, { message: 'Invalid call: the first message of an engagement must be a TryCall' }));
      }
      return;
    }
    if (!msg.data) return;
    chunks.push(msg.data.data);
    size += msg.data.data.length;
    if (limit > 0 && size > limit) {
      done = true;
      noBody(new ApiError(E.RequestContentTooBig));
    } else if (msg.data.eof) {
      done = true;
      gotBody(chunks.length === 1 ? asBuffer(chunks[0]!) : Buffer.concat(chunks, size));
    }
  }, gone);
  call.onCancel(gone);
  return { json, body };
}

/**
 * The caller's W3C trace context from the stream's metadata (an fnts LB
 * sends it there) when the call's own headers carry none, so the agent's
 * spans continue the caller's trace.
 */
function withTraceContext(call: Call, metadata: GrpcServerCall['metadata']): Call {
  const traceparent = metadata['traceparent'];
  if (typeof traceparent !== 'string' || call.headers.some((h, i) => i % 2 === 0 && sameName(h, 'traceparent'))) return call;
  const tracestate = metadata['tracestate'];
  return { ...call, headers: [...call.headers, 'traceparent', traceparent, ...(typeof tracestate === 'string' ? ['tracestate', tracestate] : [])] };
}

/** The answer's body as DataFrames of at most MAX_FRAME_BYTES. */
function dataFrames(body: Buffer, into: Buffer[]): void {
  for (let at = 0; at < body.length; at += MAX_FRAME_BYTES) into.push(encodeRunnerMsg({ data: { data: body.subarray(at, at + MAX_FRAME_BYTES), eof: false } }));
}

export class RunnerServer {
  private readonly server: GrpcH2Server;
  private readonly log: Logger;
  private active = 0;
  private received = 0;
  private handled = 0;
  private draining = false;
  private idle: (() => void) | undefined;
  /** Calls' fns as the models_call_json of their last call described them: each call of a fn shares its CallFn (the agent keeps per-fn work with it). */
  private readonly fns = new FnInterner();

  constructor(private readonly o: RunnerServerOptions) {
    this.log = o.log.child({ module: 'runner' });
    const status = unary(() => encodeRunnerStatus(this.status()));
    this.server = new GrpcH2Server({
      tls: o.tls,
      maxMessageBytes: MAX_MESSAGE_BYTES,
      onError: (err) => this.log.warn({ err }, 'runner protocol server error'),
      methods: new Map([
        [ENGAGE_PATH, (call: GrpcServerCall) => this.engage(call)],
        [STATUS_PATH, status],
        [STATUS2_PATH, status],
        // ConfigStatus has no field this runner sets: an empty message.
        [CONFIGURE_PATH, unary(() => encodeEmpty())],
        ['/RunnerProtocol/StreamLogs', (call: GrpcServerCall) => call.fail(GrpcStatus.UNIMPLEMENTED, 'this runner streams no logs: call logs are in the call records')],
      ]),
    });
  }

  /** Binds the gRPC port (0: any free port) and answers with the port bound. */
  listen(host: string, port: number): Promise<number> {
    return this.server.listen(host, port);
  }

  /** Calls in flight, and calls received and handled (not refused) since start: RunnerStatus. */
  status(): RunnerStatusMsg {
    return runnerStatusMessage({ active: this.active, received: this.received, handled: this.handled, draining: this.draining });
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

  /** Stops serving: calls still open after a second are cut. Idempotent. */
  async close(): Promise<void> {
    this.draining = true;
    await this.server.close(1000);
  }

  private engage(call: GrpcServerCall): void {
    this.received++;
    this.active++;
    this.serve(call)
      .catch((err: unknown) => {
        this.log.warn({ err }, 'engagement failed');
        call.fail(GrpcStatus.INTERNAL, err instanceof Error ? err.message : String(err));
      })
      .finally(() => {
        if (--this.active === 0) this.idle?.();
      });
  }

  private async serve(stream: GrpcServerCall): Promise<void> {
    const request = inbound(stream, this.o.maxRequestBytes);
    let tried: TryCallMsg;
    try {
      tried = await request.json;
    } catch (err) {
      // No TryCall: nothing to answer with a CallFinished.
      stream.fail(GrpcStatus.INVALID_ARGUMENT, err instanceof Error ? err.message : String(err));
      return;
    }
    let call: Call;
    let secrets: Map<string, string> | undefined;
    try {
      const wired = this.wireCall(tried.models_call_json);
      secrets = wired.secrets;
      call = withTraceContext(wired.call, stream.metadata);
    } catch (err) {
      const e = err instanceof ApiError ? err : new ApiError(E.InvalidJSON);
      this.counted('handled');
      this.finish(stream, [], refusalMessage('', e.status, e.message));
      return;
    }
    if (this.draining) {
      this.counted('refused');
      // The LB is told this runner drains, not only that it is full: an fnts LB stops placing calls here.
      stream.respond({ [DRAINING_HEADER]: '1' });
      this.finish(stream, [], refusalMessage(call.id, 503, E.CallTimeoutServerBusy.message));
      return;
    }
    // Accepted: from these headers on, the LB treats the call as committed.
    stream.respond();
    let body: Buffer;
    try {
      body = await request.body;
    } catch (err) {
      const e = err instanceof ApiError ? err : new ApiError(E.ClientCancelled);
      this.counted('handled');
      this.finish(stream, [], refusalMessage(call.id, e.status, e.message));
      return;
    }
    // The LB says the call has waited and this runner is its first choice.
    if (tried.extensions[MAKE_ROOM_EXTENSION] === '1') this.o.invoker.makeRoom?.(call);
    // The values the call brought, for its fn's containers of its version, while it runs.
    const release = secrets && this.o.secrets ? this.o.secrets.hold(call.fn.fnId, call.fn.secretsVersion ?? '', secrets) : undefined;
    const running = this.o.invoker.invoke(call, body.length === 0 ? null : body);
    if (release) running.outcome.then(release, release);
    // An fnts LB that keeps records asks for the call's log (read only then: reading it keeps it).
    const log = (): Promise<string> | undefined => (tried.extensions[LOG_EXTENSION] === '1' ? running.log : undefined);
    // The LB gave up on the call (its caller left, or it is stopping).
    stream.onCancel(() => running.cancel());
    let response: CallResponse;
    try {
      response = await running.response;
    } catch (err) {
      const outcome = await running.outcome;
      if (!outcome.ran && outcome.httpStatus === 503) {
        // Never ran: the LB may place it elsewhere (told when this runner could make room for it).
        this.counted('refused');
        this.finish(stream, [], refusalMessage(call.id, 503, err instanceof Error ? err.message : String(err), this.o.invoker.roomIn?.(call)));
        return;
      }
      this.counted('handled');
      this.finish(stream, [], finishedMessage(outcome, call.fn.image, false), log());
      return;
    }
    this.counted('handled');
    const answer = call.triggerId !== undefined ? encodeTriggerAnswer(response.status, response.headers) : response;
    const headers = [];
    for (let i = 0; i + 1 < answer.headers.length; i += 2) headers.push({ key: answer.headers[i]!, value: answer.headers[i + 1]! });
    const start = encodeRunnerMsg({ result_start: { http: { status_code: answer.status, headers } } });
    if (Buffer.isBuffer(response.body)) {
      // The whole answer is here: it goes to the LB in one write, CallFinished included.
      const messages = [start];
      dataFrames(response.body, messages);
      this.finish(stream, messages, finishedMessage(await running.outcome, call.fn.image, true), log());
      return;
    }
    await stream.write(start);
    await this.sendStream(stream, response.body);
    this.finish(stream, [], finishedMessage(await running.outcome, call.fn.image, true), log());
  }

  /**
   * A call from models_call_json, and the secrets it brought (taken out
   * first: no Call holds them); a trigger call's decorated request made the
   * caller's again (the agent decorates it for the function).
   */
  private wireCall(json: string): { call: Call; secrets: Map<string, string> | undefined } {
    let parsed: unknown;
    try {
      parsed = JSON.parse(json);
    } catch {
      throw new ApiError(E.InvalidJSON, { message: 'Invalid call: models_call_json is not JSON' });
    }
    const secrets = takeSecrets(parsed);
    const call = this.fns.share(callFromJson(parsed));
    if (call.triggerId === undefined) return { call, secrets };
    const caller = undecorateTrigger(call.headers);
    // Headers not in the trigger form: the function gets them as they came.
    if (!caller) return { call: { ...call, triggerId: undefined }, secrets };
    return { call: { ...call, method: caller.method, url: caller.url || call.url, headers: caller.headers }, secrets };
  }

  /** A streamed answer as DataFrames, with backpressure. */
  private async sendStream(stream: GrpcServerCall, body: Readable): Promise<void> {
    try {
      for await (const chunk of body) {
        const frames: Buffer[] = [];
        dataFrames(chunk as Buffer, frames);
        for (const f of frames) await stream.write(f);
        if (!stream.open) break;
      }
    } finally {
      if (!body.destroyed) body.destroy();
    }
  }

  private counted(result: 'handled' | 'refused'): void {
    if (result === 'handled') this.handled++;
    tellEach([this.o.events], (e) => e.onEngagement(result), this.log, 'an engagement listener');
  }

  /**
   * Sends `messages` (framed) and CallFinished, and ends the call; with
   * `log` (an fnts LB asked for it in TryCall.extensions), the call's log
   * goes in the trailers once the container has moved on. The LB's caller
   * has its answer already.
   */
  private finish(stream: GrpcServerCall, messages: Buffer[], finished: CallFinishedMsg, log?: Promise<string>): void {
    messages.push(encodeRunnerMsg({ finished }));
    const bytes = messages.length === 1 ? messages[0]! : Buffer.concat(messages);
    if (!log) {
      stream.end(bytes);
      return;
    }
    void stream.write(bytes);
    log.then(
      (text) => stream.end(undefined, text === '' ? {} : { [LOG_TRAILER]: Buffer.from(text).toString('base64') }),
      () => stream.end(),
    );
  }
}
