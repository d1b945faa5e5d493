/**
 * The invoke endpoints, on Node's HTTP server directly (the hot path; the
 * management API goes through Fastify):
 *
 *   POST /invoke/{fnID}          the function's answer as it gives it
 *   ANY  /t/{appName}{source}    an HTTP trigger: the caller's method, URL and
 *                                headers reach the function as Fn-Http-*;
 *                                Fn-Http-Status / Fn-Http-H-* come back as
 *                                the status and headers
 *
 * Every answer carries Fn-Call-Id. Lookups are cached (the datastore is off
 * the hot path); any change made through the API clears the cache.
 */
import type { IncomingMessage, ServerResponse } from 'node:http';
import { Transform, type Readable } from 'node:stream';
import type { Logger } from 'pino';
import { functionSpec, type Agent, type FunctionSpec } from '../agent/index.js';
import { sameName } from '../agent/protocol/http1.js';
import { withoutHopHeaders, type CallResponse, type RawHeaders } from '../agent/protocol/http-stream.js';
import type { Datastore } from '../datastore/index.js';
import { ApiError, E, newId, routeError, type App, type Trigger } from '../models/index.js';
import type { ResourceChange } from './api.js';
import { toHttpError } from './errors.js';

export interface InvokeDeps {
  readonly agent: Agent;
  readonly datastore: Datastore;
  readonly logger: Logger;
  /** FN_MAX_REQUEST_SIZE; 0 = no limit. */
  readonly maxRequestBytes: number;
}

interface Target {
  readonly spec: FunctionSpec;
  readonly app: App;
  readonly trigger?: Trigger;
}

/** Go's canonical header form ("x-my-header" -> "X-My-Header"), as Fn and the FDKs write header names. */
function canonical(name: string): string {
  return name.toLowerCase().replace(/(^|-)([a-z])/g, (_m, sep: string, c: string) => sep + c.toUpperCase());
}

/** Request bodies up to this size (declared by Content-Length) are read whole before the call. */
const SMALL_BODY_BYTES = 64 * 1024;

/** Reads a request body of known, small length. */
function readAll(req: IncomingMessage): Promise<Buffer> {
  return new Promise<Buffer>((resolve, reject) => {
    const chunks: Buffer[] = [];
    let size = 0;
    req.on('data', (c: Buffer) => {
      chunks.push(c);
      size += c.length;
    });
    req.once('end', () => resolve(chunks.length === 1 ? chunks[0]! : Buffer.concat(chunks, size)));
    req.once('error', reject);
    req.once('aborted', () => reject(new ApiError(E.ClientCancelled)));
  });
}

/** Bodies up to this size are sent in one write together with the headers. */
const SINGLE_WRITE_BYTES = 64 * 1024;

function looksLikeJson(body: Buffer): boolean {
  return body.length > 0 && body[0] === 0x7b; // '{'
}

export class InvokeHandler {
  private readonly fns = new Map<string, Promise<Target>>();
  private readonly triggers = new Map<string, Promise<Target>>();
  private readonly log: Logger;

  constructor(private readonly deps: InvokeDeps) {
    this.log = deps.logger.child({ module: 'invoke' });
  }

  /** True for the paths this handler serves. */
  static matches(url: string): boolean {
    return url.startsWith('/invoke/') || url.startsWith('/t/');
  }

  /** Forgets cached lookups and retires containers of what changed. */
  changed(change: ResourceChange): void {
    this.fns.clear();
    this.triggers.clear();
    this.ready.clear();
    if (change.kind === 'fn') this.deps.agent.retireFunction({ fnId: change.id });
    if (change.kind === 'app') this.deps.agent.retireFunction({ appId: change.id });
  }

  /** Lookups that have resolved, readable without awaiting a promise (the common case). */
  private readonly ready = new Map<string, Target>();

  private cached(cache: Map<string, Promise<Target>>, key: string, load: () => Promise<Target>): Promise<Target> {
    let hit = cache.get(key);
    if (!hit) {
      const loading = load();
      hit = loading;
      cache.set(key, loading);
      loading.then(
        (t) => {
          if (cache.get(key) === loading) this.ready.set(key, t);
        },
        // Misses are not cached: a fn created a moment later must be found.
        () => {
          if (cache.get(key) === loading) cache.delete(key);
        },
      );
    }
    return hit;
  }

  private fnTarget(fnId: string): Promise<Target> {
    return this.cached(this.fns, fnId, async () => {
      const fn = await this.deps.datastore.getFnById(fnId);
      const app = await this.deps.datastore.getAppById(fn.app_id);
      return { spec: functionSpec(app, fn), app };
    });
  }

  private triggerTarget(appName: string, source: string): Promise<Target> {
    return this.cached(this.triggers, `${appName}\0${source}`, async () => {
      const app = await this.deps.datastore.getAppByName(appName);
      const trigger = await this.deps.datastore.getTriggerBySource(app.id, 'http', source);
      const fn = await this.deps.datastore.getFnById(trigger.fn_id);
      return { spec: functionSpec(app, fn), app, trigger };
    });
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

    let target: Target;
    let headers: RawHeaders;
    if (path.startsWith('/invoke/')) {
      const fnId = path.slice('/invoke/'.length);
      if (fnId === '' || fnId.includes('/')) throw routeError(E.PathNotFound, req.method ?? 'GET', rawPath);
      if (req.method !== 'POST') throw routeError(E.MethodNotAllowed, req.method ?? 'GET', rawPath);
      target = this.ready.get(fnId) ?? (await this.fnTarget(fnId));
      headers = withoutHopHeaders(req.rawHeaders, 'content-length');
    } else {
      const rest = path.slice('/t/'.length);
      const slash = rest.indexOf('/');
      const appName = slash < 0 ? rest : rest.slice(0, slash);
      const source = slash < 0 ? '/' : rest.slice(slash);
      if (appName === '') throw routeError(E.PathNotFound, req.method ?? 'GET', rawPath);
      target = this.ready.get(`${appName}\0${source}`) ?? (await this.triggerTarget(appName, source));
      headers = triggerHeaders(req, framing.host);
    }

    const { body, length } = await this.requestBody(req, framing);
    const call = this.deps.agent.invoke(target.spec, { id: callId, headers, body, bodyLength: length });
    // A caller that hangs up cancels its call.
    res.once('close', () => {
      if (!res.writableFinished) call.cancel();
    });
    const response = await call.response;
    if (target.trigger) writeTrigger(res, callId, response, this.log);
    else writeInvoke(res, callId, response, this.log);
  }

  /**
   * The request body for the function: none; a small body of declared length
   * read whole (it then goes to the container in one write); else the stream,
   * cut at FN_MAX_REQUEST_SIZE.
   */
  private async requestBody(req: IncomingMessage, framing: RequestFraming): Promise<{ body: Readable | Buffer | null; length: number | undefined }> {
    const { length, chunked } = framing;
    if (!chunked && (length === undefined || length === 0)) return { body: null, length: 0 };
    const declared = chunked ? undefined : length;
    const max = this.deps.maxRequestBytes;
    if (max > 0 && declared !== undefined && declared > max) throw new ApiError(E.RequestContentTooBig);
    if (declared !== undefined && declared <= SMALL_BODY_BYTES) {
      // A small body usually arrives with the headers: Node's parser has
      // queued it by the next microtask, and read() takes it without a listener.
      await null;
      if (req.readableLength === declared) {
        const whole = req.read() as Buffer | null;
        if (whole?.length === declared) return { body: whole, length: declared };
        if (whole) req.unshift(whole);
      }
      return { body: await readAll(req), length: declared };
    }
    if (max <= 0) return { body: req, length: declared };
    let seen = 0;
    const limited = new Transform({
      transform(chunk: Buffer, _enc, done) {
        seen += chunk.length;
        if (seen > max) done(new ApiError(E.RequestContentTooBig));
        else done(null, chunk);
      },
    });
    req.pipe(limited);
    req.once('error', (err) => limited.destroy(err));
    // Until the call sends the body, an error is only recorded (limited.errored);
    // the exchange checks for it and fails the call with it.
    limited.on('error', () => undefined);
    return { body: limited, length: declared };
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
    // The rest of an oversized upload is not worth reading: close after answering.
    if (answer.status === 413) res.setHeader('Connection', 'close');
    res.setHeader('Content-Type', 'application/json; charset=utf-8');
    res.setHeader('Content-Length', Buffer.byteLength(body));
    res.end(body);
    // An unread request body would hold the connection; let Node discard it.
    if (!req.complete) req.resume();
  }
}

interface RequestFraming {
  readonly length: number | undefined;
  readonly chunked: boolean;
  readonly host: string | undefined;
}

/** Content-Length, Transfer-Encoding and Host, read from raw headers in one pass. */
function requestFraming(raw: string[]): RequestFraming {
  let length: number | undefined;
  let chunked = false;
  let host: string | undefined;
  for (let i = 0; i < raw.length; i += 2) {
    const name = raw[i]!;
    if (sameName(name, 'content-length')) length = Number(raw[i + 1]);
    else if (sameName(name, 'transfer-encoding')) chunked = true;
    else if (sameName(name, 'host')) host = raw[i + 1];
  }
  return { length, chunked, host };
}

/**
 * Trigger request headers (as Fn sends them): hop-by-hop headers dropped,
 * Content-Type kept, every other header X as Fn-Http-H-X, plus the method
 * and the full URL the caller used.
 */
function triggerHeaders(req: IncomingMessage, host: string | undefined): RawHeaders {
  const clean = withoutHopHeaders(req.rawHeaders);
  const out: RawHeaders = [];
  for (let i = 0; i < clean.length; i += 2) {
    const name = clean[i]!;
    out.push(sameName(name, 'content-type') ? 'Content-Type' : `Fn-Http-H-${canonical(name)}`, clean[i + 1]!);
  }
  const tls = (req.socket as { encrypted?: boolean }).encrypted;
  out.push(
    'Fn-Http-Method',
    req.method ?? 'GET',
    'Fn-Http-Request-Url',
    `${tls ? 'https' : 'http'}://${host ?? 'localhost'}${req.url ?? '/'}`,
    'Fn-Intent',
    'httprequest',
  );
  return out;
}

/** The function's answer as it gave it, plus Fn-Call-Id. */
function writeInvoke(res: ServerResponse, callId: string, response: CallResponse, log: Logger): void {
  writeAnswer(res, response.status, response.headers.concat('Fn-Call-Id', callId), response.body, log);
}

/**
 * A trigger's answer (as Fn gives it): only Fn-Http-H-X (as X) and
 * Content-Type pass; Fn-Http-Status sets the status unless the function
 * itself failed (>= 400).
 */
function writeTrigger(res: ServerResponse, callId: string, response: CallResponse, log: Logger): void {
  let userStatus = 0;
  const out: RawHeaders = [];
  const h = response.headers;
  for (let i = 0; i < h.length; i += 2) {
    const name = h[i]!;
    const lower = name.toLowerCase();
    if (lower.startsWith('fn-http-h-')) {
      if (lower.length > 'fn-http-h-'.length) out.push(name.slice('fn-http-h-'.length), h[i + 1]!);
    } else if (lower === 'content-type') out.push('Content-Type', h[i + 1]!);
    else if (lower === 'fn-http-status') {
      const n = Number(h[i + 1]);
      if (Number.isInteger(n) && n >= 100 && n <= 599) userStatus = n;
    }
  }
  out.push('Fn-Call-Id', callId);
  writeAnswer(res, response.status >= 400 ? response.status : userStatus || 200, out, response.body, log);
}

function writeAnswer(res: ServerResponse, status: number, headers: RawHeaders, body: Buffer | Readable, log: Logger): void {
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
