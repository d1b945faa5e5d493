/**
 * The invoke endpoints, on Node's HTTP server directly (the hot path; the
 * management API goes through Fastify):
 *
 *   POST /invoke/{fnID}          the function's answer as it gives it
 *   ANY  /t/{appName}{source}    an HTTP trigger: the caller's method, URL and
 *                                headers reach the function; its answer's
 *                                status and headers reach the caller (each
 *                                format does its mapping: agent/protocol)
 *
 * Every answer carries Fn-Call-Id. Calls run through an Invoker; fns and
 * triggers are found through the lookup cache (lookup.ts).
 */
import type { IncomingMessage, ServerResponse } from 'node:http';
import { Transform, type Readable } from 'node:stream';
import type { Logger } from 'pino';
import { sameName, withoutHeaders, withoutHopHeaders, type CallResponse, type Invoker, type RawHeaders } from '../call/index.js';
import { carriesTokenShape, type InvokeGuard } from '../auth/index.js';
import { ApiError, E, newId, routeError, type Call } from '../models/index.js';
import { unauthenticated } from './auth.js';
import { toHttpError } from './errors.js';
import type { Target, TargetLookup } from './lookup.js';

/** Takes detached calls (Fn-Invoke-Type: detached): persists them before the caller hears 202. */
export interface DetachedIntake {
  /**
   * The largest detached body it keeps (FNTS_ASYNC_MAX_BODY_SIZE): a body
   * is stored whole until its call runs, so it is bounded even when
   * FN_MAX_REQUEST_SIZE is not; the smaller of the two applies.
   */
  readonly maxBodyBytes: number;
  /**
   * Resolves once the call is durable, with the id of the call that stands
   * for it (an earlier one's, for a repeated idempotency key); throws (503)
   * when it could not be kept.
   */
  accept(call: Call, body: Buffer, idempotencyKey?: string): Promise<string>;
}

export interface InvokeDeps {
  /** Runs the calls: the local agent, or (on an LB) runners. */
  readonly invoker: Invoker;
  /** Where detached calls go; without one they run as synchronous calls. */
  readonly detached?: DetachedIntake;
  readonly lookup: TargetLookup;
  readonly logger: Logger;
  /** FN_MAX_REQUEST_SIZE; 0 = no limit. */
  readonly maxRequestBytes: number;
  /** Checks callers' tokens for fns that ask for one (fnts.io/invoke-auth); without it such fns refuse every call. */
  readonly guard?: InvokeGuard;
}

/** Request bodies up to this size (declared by Content-Length) take the fast path: read whole with no stream. */
const SMALL_BODY_BYTES = 64 * 1024;

/**
 * A call's body is gathered before a container is taken for it: whole when
 * it is at most this big, else this much of it before the rest streams in
 * behind. A client that stalls its upload holds no container meanwhile (the
 * server's request timeout ends the upload).
 */
const GATHER_BYTES = 1024 * 1024;

/** The client went away mid-upload: its doing, not the server's. */
function clientGone(err?: unknown): ApiError {
  return new ApiError(E.ClientCancelled, { cause: err });
}

interface Gathered {
  readonly chunks: Buffer[];
  readonly size: number;
  /** The whole body is in `chunks`. */
  readonly ended: boolean;
}

/**
 * Reads `req` until it ends or `threshold` bytes have come, then pauses it.
 * Rejects with 413 past `limit`, with ClientCancelled when the client leaves.
 */
function gather(req: IncomingMessage, threshold: number, limit: number): Promise<Gathered> {
  return new Promise<Gathered>((resolve, reject) => {
    const chunks: Buffer[] = [];
    let size = 0;
    const done = (err: unknown, ended = false): void => {
      req.off('data', onData);
      req.off('end', onEnd);
      req.off('error', onError);
      req.off('aborted', onError);
      if (err) reject(err);
      else {
        if (!ended) req.pause();
        resolve({ chunks, size, ended });
      }
    };
    const onData = (c: Buffer): void => {
      chunks.push(c);
      size += c.length;
      if (size > limit) done(new ApiError(E.RequestContentTooBig));
      else if (size >= threshold) done(undefined);
    };
    const onEnd = (): void => done(undefined, true);
    const onError = (err?: unknown): void => done(clientGone(err));
    req.on('data', onData);
    req.once('end', onEnd);
    req.once('error', onError);
    req.once('aborted', onError);
  });
}

function joined(g: Gathered): Buffer {
  return g.chunks.length === 1 ? g.chunks[0]! : Buffer.concat(g.chunks, g.size);
}

/** Bodies up to this size are sent in one write together with the headers. */
const SINGLE_WRITE_BYTES = 64 * 1024;

function looksLikeJson(body: Buffer): boolean {
  return body.length > 0 && body[0] === 0x7b; // '{'
}

export class InvokeHandler {
  private readonly log: Logger;

  constructor(private readonly deps: InvokeDeps) {
    this.log = deps.logger.child({ module: 'invoke' });
  }

  /** True for the paths this handler serves. */
  static matches(url: string): boolean {
    return url.startsWith('/invoke/') || url.startsWith('/t/');
  }

  handle(req: IncomingMessage, res: ServerResponse): void {
    const callId = newId();
    this.serve(req, res, callId).catch((err: unknown) => this.fail(req, res, callId, err));
  }

  private async serve(req: IncomingMessage, res: ServerResponse, callId: string): Promise<void> {
    const rawUrl = req.url ?? '/';
    const q = rawUrl.indexOf('?');
    const rawPath = q < 0 ? rawUrl : rawUrl.slice(0, q);
    let path = rawPath;
    if (rawPath.includes('%')) {
      try {
        path = decodeURIComponent(rawPath);
      } catch {
        throw new ApiError(E.PathMalformed);
      }
    }
    // The request's framing, from rawHeaders: req.headers would build an object per call.
    const framing = requestFraming(req.rawHeaders);

    let target: Target | Promise<Target>;
    if (path.startsWith('/invoke/')) {
      const fnId = path.slice('/invoke/'.length);
      if (fnId === '' || fnId.includes('/')) throw routeError(E.PathNotFound, req.method ?? 'GET', rawPath);
      if (req.method !== 'POST') throw routeError(E.MethodNotAllowed, req.method ?? 'GET', rawPath);
      target = this.deps.lookup.byFn(fnId);
    } else {
      const rest = path.slice('/t/'.length);
      const slash = rest.indexOf('/');
      const appName = slash < 0 ? rest : rest.slice(0, slash);
      const source = slash < 0 ? '/' : rest.slice(slash);
      if (appName === '') throw routeError(E.PathNotFound, req.method ?? 'GET', rawPath);
      target = this.deps.lookup.byTrigger(appName, source);
    }
    const { fn, triggerId } = target instanceof Promise ? await target : target;
    // Before a byte of the body is read, and before anything runs.
    if (fn.invokeAuth === true) await this.authorize(req, fn.appName);

    const tls = (req.socket as { encrypted?: boolean }).encrypted;
    const made: Call = {
      id: callId,
      type: framing.detached && this.deps.detached ? 'detached' : 'sync',
      fn,
      triggerId,
      method: req.method ?? 'GET',
      url: `${tls ? 'https' : 'http'}://${framing.host ?? 'localhost'}${rawUrl}`,
      headers: this.functionHeaders(req, fn.invokeAuth === true),
      createdAt: Date.now(),
    };
    if (made.type === 'detached') {
      await this.acceptDetached(req, res, framing, { ...made, headers: withoutHeaders(made.headers, ['fn-invoke-type']) });
      return;
    }
    const { body, length } = await this.requestBody(req, framing);
    const call = this.deps.invoker.invoke(made, body, length);
    // A caller that hangs up cancels its call.
    res.once('close', () => {
      if (!res.writableFinished) call.cancel();
    });
    writeAnswer(res, callId, await call.response, this.log);
  }

  /**
   * The caller's headers as the function gets them: a token of fnts's was
   * for fnts and does not reach the function (a public fn's author would
   * otherwise get the token of whoever calls it with one: a script sending
   * its token on every request); with invoke-auth no Authorization header
   * does. A function's own schemes (Basic, its own bearer tokens) reach a
   * public fn, as in Fn.
   */
  private functionHeaders(req: IncomingMessage, invokeAuth: boolean): RawHeaders {
    const headers = withoutHopHeaders(req.rawHeaders, 'content-length');
    const authorization = req.headers.authorization;
    if (authorization === undefined) return headers;
    const ours = invokeAuth || (this.deps.guard ? this.deps.guard.carriesToken(authorization) : carriesTokenShape(authorization));
    return ours ? withoutHeaders(headers, ['authorization']) : headers;
  }

  /** invoke-auth: 401 without a valid token, 403 for a token that may not invoke this app. */
  private async authorize(req: IncomingMessage, appName: string): Promise<void> {
    const guard = this.deps.guard;
    if (!guard) throw new ApiError(E.InvokeAuthUnavailable);
    const verdict = await guard.verdict(req.headers.authorization, appName);
    if (verdict === 'ok') return;
    if (verdict === 'forbidden') throw new ApiError(E.ForbiddenApp);
    throw unauthenticated(verdict === 'missing' ? E.Unauthenticated : E.InvalidToken);
  }

  /**
   * A detached call: its whole body is read (within the detached cap: see
   * detachedLimit), the call persisted, and only then is the caller
   * answered 202 with its id.
   */
  private async acceptDetached(req: IncomingMessage, res: ServerResponse, framing: RequestFraming, call: Call): Promise<void> {
    const intake = this.deps.detached!;
    const body = await readDetachedBody(req, framing, this.detachedLimit());
    const id = await intake.accept(call, body, framing.idempotencyKey);
    res.writeHead(202, ['Fn-Call-Id', id, 'Content-Length', '0']);
    res.end();
  }

  /** The largest detached body taken: the intake's cap, within FN_MAX_REQUEST_SIZE when that is set. */
  private detachedLimit(): number {
    const cap = this.deps.detached?.maxBodyBytes ?? Infinity;
    return this.deps.maxRequestBytes > 0 ? Math.min(cap, this.deps.maxRequestBytes) : cap;
  }

  /**
   * The request body for the function, gathered before any container is
   * taken for it (GATHER_BYTES): none; read whole when small or when it
   * ends within GATHER_BYTES (it then goes to the container in one write);
   * else what came first followed by the rest as a stream, cut at
   * FN_MAX_REQUEST_SIZE.
   */
  private async requestBody(req: IncomingMessage, framing: RequestFraming): Promise<{ body: Readable | Buffer | null; length: number | undefined }> {
    const { length, chunked } = framing;
    if (!chunked && (length === undefined || length === 0)) return { body: null, length: 0 };
    const declared = chunked ? undefined : length;
    const max = this.deps.maxRequestBytes;
    if (max > 0 && declared !== undefined && declared > max) throw new ApiError(E.RequestContentTooBig);
    const limit = max > 0 ? max : Infinity;
    if (declared !== undefined && declared <= SMALL_BODY_BYTES) {
      // A small body usually arrives with the headers: Node's parser has
      // queued it by the next microtask, and read() takes it without a listener.
      await Promise.resolve();
      if (req.readableLength === declared) {
        const whole = req.read() as Buffer | null;
        if (whole?.length === declared) return { body: whole, length: declared };
        if (whole) req.unshift(whole);
      }
    }
    const first = await gather(req, GATHER_BYTES, limit);
    if (first.ended) return { body: joined(first), length: first.size };
    // The rest streams behind what came first, still counted against the limit.
    let seen = first.size;
    const rest = new Transform({
      transform(chunk: Buffer, _enc, done) {
        seen += chunk.length;
        if (seen > limit) done(new ApiError(E.RequestContentTooBig));
        else done(null, chunk);
      },
    });
    rest.push(joined(first));
    req.pipe(rest);
    req.once('error', (err) => rest.destroy(clientGone(err)));
    req.once('aborted', () => rest.destroy(clientGone()));
    // Until the call sends the body, an error is only recorded (rest.errored);
    // the exchange checks for it and fails the call with it.
    rest.on('error', () => undefined);
    return { body: rest, length: declared };
  }

  private fail(req: IncomingMessage, res: ServerResponse, callId: string, err: unknown): void {
    if (ApiError.is(err, E.ClientCancelled) || res.destroyed) {
      res.destroy();
      return;
    }
    if (res.headersSent) {
      res.destroy();
      return;
    }
    const answer = toHttpError(err, this.log);
    const body = JSON.stringify(answer.body);
    res.statusCode = answer.status;
    for (const [k, v] of Object.entries(answer.headers)) res.setHeader(k, v);
    res.setHeader('Fn-Call-Id', callId);
    res.setHeader('Content-Type', 'application/json; charset=utf-8');
    res.setHeader('Content-Length', Buffer.byteLength(body));
    if (!req.complete) discardRest(req);
    res.end(body);
  }

  /**
   * `Expect: 100-continue`: a body declared over FN_MAX_REQUEST_SIZE is
   * refused before the client sends it; anything else is invited in.
   */
  checkContinue(req: IncomingMessage, res: ServerResponse): boolean {
    const { length, detached } = requestFraming(req.rawHeaders);
    const max = detached && this.deps.detached ? this.detachedLimit() : this.deps.maxRequestBytes > 0 ? this.deps.maxRequestBytes : Infinity;
    if (length !== undefined && length > max) {
      // The client holds its body back until told to go on: answer and close.
      res.setHeader('Connection', 'close');
      this.fail(req, res, newId(), new ApiError(E.RequestContentTooBig));
      return true;
    }
    return false;
  }
}

/**
 * A detached call's body, read whole into one buffer (it is stored whole):
 * refused with 413 as soon as it is known to pass `limit` (declared, or
 * counted), so that no more than `limit` bytes are ever held for it. A
 * declared length is read straight into a buffer of that size; a chunked
 * body is gathered and copied once into a buffer of its final size, each
 * chunk let go as it is copied. The event loop is free between chunks.
 */
async function readDetachedBody(req: IncomingMessage, framing: RequestFraming, limit: number): Promise<Buffer> {
  const { length, chunked } = framing;
  if (!chunked && (length === undefined || length === 0)) return Buffer.alloc(0);
  const declared = chunked ? undefined : length;
  if (declared !== undefined && declared > limit) throw new ApiError(E.RequestContentTooBig);
  return new Promise<Buffer>((resolve, reject) => {
    const into = declared !== undefined ? Buffer.allocUnsafe(declared) : undefined;
    const chunks: Array<Buffer | undefined> = [];
    let size = 0;
    const done = (err: unknown): void => {
      req.off('data', onData);
      req.off('end', onEnd);
      req.off('error', onError);
      req.off('aborted', onError);
      if (err) {
        reject(err);
        return;
      }
      if (into) {
        resolve(size === into.length ? into : into.subarray(0, size));
        return;
      }
      const whole = Buffer.allocUnsafe(size);
      let at = 0;
      for (let i = 0; i < chunks.length; i++) {
        at += chunks[i]!.copy(whole, at);
        chunks[i] = undefined;
      }
      resolve(whole);
    };
    const onData = (c: Buffer): void => {
      if (size + c.length > (into ? into.length : limit)) {
        done(new ApiError(E.RequestContentTooBig));
        return;
      }
      if (into) c.copy(into, size);
      else chunks.push(c);
      size += c.length;
    };
    const onEnd = (): void => done(undefined);
    const onError = (err?: unknown): void => done(clientGone(err));
    req.on('data', onData);
    req.once('end', onEnd);
    req.once('error', onError);
    req.once('aborted', onError);
  });
}

/** How much of a refused upload is read (and dropped) so its sender sees the answer. */
const DISCARD_LIMIT_BYTES = 64 * 1024 * 1024;

/**
 * A request answered before its body was read: the rest is read and dropped,
 * so a client still uploading gets the answer rather than a broken pipe, and
 * the connection stays usable. Past DISCARD_LIMIT_BYTES the connection is cut.
 */
function discardRest(req: IncomingMessage): void {
  let seen = 0;
  req.unpipe();
  req.removeAllListeners('data');
  req.on('data', (chunk: Buffer) => {
    seen += chunk.length;
    if (seen > DISCARD_LIMIT_BYTES) req.socket.destroy();
  });
  req.on('error', () => undefined);
  req.resume();
}

interface RequestFraming {
  readonly length: number | undefined;
  readonly chunked: boolean;
  readonly host: string | undefined;
  /** Fn-Invoke-Type: detached */
  readonly detached: boolean;
  /** Fn-Idempotency-Key (fnts's extension), for detached calls. */
  readonly idempotencyKey: string | undefined;
}

/** Content-Length, Transfer-Encoding and Host, read from raw headers in one pass. */
function requestFraming(raw: string[]): RequestFraming {
  let length: number | undefined;
  let chunked = false;
  let host: string | undefined;
  let detached = false;
  let idempotencyKey: string | undefined;
  for (let i = 0; i < raw.length; i += 2) {
    const name = raw[i]!;
    if (sameName(name, 'content-length')) length = Number(raw[i + 1]);
    else if (sameName(name, 'transfer-encoding')) chunked = true;
    else if (sameName(name, 'host')) host = raw[i + 1];
    else if (sameName(name, 'fn-invoke-type')) detached = raw[i + 1]!.trim().toLowerCase() === 'detached';
    else if (sameName(name, 'fn-idempotency-key')) idempotencyKey = raw[i + 1]!.trim() || undefined;
  }
  return { length, chunked, host, detached, idempotencyKey };
}

/** The function's answer as the caller gets it, plus Fn-Call-Id. */
function writeAnswer(res: ServerResponse, callId: string, response: CallResponse, log: Logger): void {
  const { status, body } = response;
  const headers = response.headers.concat('Fn-Call-Id', callId);
  if (Buffer.isBuffer(body)) {
    let hasType = false;
    for (let i = 0; i < headers.length && !hasType; i += 2) hasType = sameName(headers[i]!, 'content-type');
    if (!hasType && body.length > 0) headers.push('Content-Type', looksLikeJson(body) ? 'application/json; charset=utf-8' : 'text/plain; charset=utf-8');
    headers.push('Content-Length', String(body.length));
    res.writeHead(status, headers);
    // A string body goes out in the same write as the headers (a Buffer would
    // take a second one); latin1 maps bytes to chars one to one.
    if (body.length <= SINGLE_WRITE_BYTES) res.end(body.toString('latin1'), 'latin1');
    else res.end(body);
    return;
  }
  res.writeHead(status, headers);
  body.on('error', (err) => {
    log.warn({ err }, 'function response stream failed');
    res.destroy();
  });
  body.pipe(res);
}
