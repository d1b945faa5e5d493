/**
 * The HTTP server: builds the Fastify app for a role and wires errors,
 * unknown paths and bodies the way Fn answers them.
 */
import { createServer, STATUS_CODES, type IncomingMessage, type ServerResponse } from 'node:http';
import type { Socket } from 'node:net';
import { createRequire } from 'node:module';
import Fastify, { LogController, type FastifyBaseLogger, type FastifyInstance, type FastifyReply } from 'fastify';
import type { Config } from '../config/index.js';
import type { CallStore, Datastore, SecretStore } from '../datastore/index.js';
import type { Queue } from '../mq/index.js';
import { E, routeError, type Changes } from '../models/index.js';
import { Readiness, type HealthCheck, type Metrics } from '../telemetry/index.js';
import type { TokenRegistry } from '../auth/index.js';
import type { TokenStore } from '../datastore/index.js';
import { registerConsole, wantsHtml } from '../console/index.js';
import { registerApi } from './api.js';
import { ChangeLog, registerChangesApi } from './changes.js';
import { guardApi } from './auth.js';
import { registerCallsApi } from './calls.js';
import { clientErrorToHttp, isClientAbort, toHttpError, type ClientError, type HttpError } from './errors.js';
import { InvokeHandler } from './invoke.js';
import { registerProbes } from './probes.js';
import { registerSecretsApi } from './secrets.js';
import { registerTokensApi } from './tokens.js';
import { isResourcePath, pathOf, recordRoutes, resource } from './routing.js';

const pkg = createRequire(import.meta.url)('../../package.json') as { version: string };
export const VERSION: string = pkg.version;

/** What the REST API serves from (roles that keep a database: full and api nodes). */
export interface ApiServing {
  readonly datastore: Datastore;
  /** Where the API tells its changes (the lookup cache and the agent listen). */
  readonly changes?: Changes;
  /** Call records and logs: serves the calls API. */
  readonly calls?: CallStore;
  /** The queue of detached calls (the calls API redrives dead ones). */
  readonly queue?: Queue;
  /** Apps' and fns' secrets: serves the secrets API (server/secrets.ts). */
  readonly secrets?: SecretStore;
  /** API tokens (FNTS_AUTH=on): /v2 needs one, and admins manage them at /v2/tokens. */
  readonly tokens?: { readonly store: TokenStore; readonly registry: TokenRegistry };
}

export interface ServerDeps {
  readonly config: Config;
  readonly logger: FastifyBaseLogger;
  /** Serve the REST API (apps, fns, triggers; calls when `api.calls` is given). Absent on LBs, runners and pool managers. */
  readonly api?: ApiServing;
  /** Serves /invoke and /t when this role runs functions. */
  readonly invoke?: InvokeHandler;
  /** What GET /ready asks (the role's dependencies); none: ready whenever it serves. */
  readonly checks?: readonly HealthCheck[];
  /** Served at /metrics; API latency is counted into it. */
  readonly metrics?: Metrics;
}

/**
 * How often Node looks for requests past their deadline: a stalled request is
 * cut at most this long after its timeout. A fraction of the shorter bound,
 * so that the bound holds for small settings too, and never more than a second.
 */
function checkingIntervalMs(config: Config): number {
  return Math.min(1000, Math.max(10, Math.floor(Math.min(config.requestHeadersTimeoutMs, config.requestTimeoutMs) / 10)));
}

/**
 * Writes `answer` straight to the socket and closes it, the way Node answers
 * parser errors itself: no request object exists, or its body is unusable.
 */
function answerOnSocket(socket: Socket, answer: HttpError): void {
  const body = JSON.stringify(answer.body);
  socket.write(
    `HTTP/1.1 ${answer.status} ${STATUS_CODES[answer.status] ?? ''}\r\n` +
      'Content-Type: application/json; charset=utf-8\r\n' +
      `Content-Length: ${Buffer.byteLength(body)}\r\n` +
      'Connection: close\r\n\r\n' +
      body,
  );
}

/** Counts an invoke request into fn_api_latency once answered, under its route template. */
function countInvoke(metrics: Metrics, req: IncomingMessage, res: ServerResponse): void {
  const t0 = performance.now();
  const path = req.url!.startsWith('/invoke/') ? '/invoke/:fnID' : '/t/:appName/*';
  res.once('finish', () => metrics.apiRequest(path, req.method ?? '', res.statusCode, performance.now() - t0));
}

export async function buildServer(deps: ServerDeps): Promise<FastifyInstance> {
  const { config, invoke, metrics } = deps;
  const tokens = deps.api?.tokens;
  /** Each connection's latest response: what a client error on it interrupts, if it is still being written. */
  const answering = new WeakMap<Socket, ServerResponse>();
  const app = Fastify({
    // Calls skip Fastify: every microsecond on that path shows in latency.
    serverFactory: (handler) =>
      createServer(
        {
          // Node's defaults let a stalled upload hold its socket for five
          // minutes and more; Fastify's timeouts do not reach a server it did not create.
          headersTimeout: config.requestHeadersTimeoutMs,
          requestTimeout: config.requestTimeoutMs,
          connectionsCheckingInterval: checkingIntervalMs(config),
        },
        (req, res) => {
          answering.set(req.socket, res);
          if (invoke && InvokeHandler.matches(req.url ?? '')) {
            if (metrics) countInvoke(metrics, req, res);
            invoke.handle(req, res);
          } else handler(req, res);
        },
      ).on('checkContinue', (req: IncomingMessage, res: ServerResponse) => {
        answering.set(req.socket, res);
        // Expect: 100-continue. A call whose body is declared too big is refused before it is sent.
        if (invoke && InvokeHandler.matches(req.url ?? '')) {
          if (metrics) countInvoke(metrics, req, res);
          if (invoke.checkContinue(req, res)) return;
          res.writeContinue();
          invoke.handle(req, res);
          return;
        }
        res.writeContinue();
        handler(req, res);
      }),
    forceCloseConnections: 'idle',
    loggerInstance: deps.logger,
    logController: new LogController({ disableRequestLogging: true }),
    bodyLimit: config.maxApiBodyBytes,
    exposeHeadRoutes: false,
    return503OnClosing: true,
    // An id of any length is looked up and not found (404), as in Fn; Node's
    // header size limit (16 KB) bounds the URL long before this does.
    routerOptions: { ignoreTrailingSlash: true, maxParamLength: 64 * 1024 },
    // Errors Fastify raises before routing (a malformed URL, say) skip the
    // error handler below; answer them through the same mapper.
    frameworkErrors: (err, req, reply) => {
      const answer = toHttpError(err, req.log);
      void (reply as FastifyReply).code(answer.status).headers(answer.headers).send(answer.body);
    },
    // Node's 'clientError': the parser refused the request or it timed out.
    // Per server, so the invoke paths (served before Fastify) get it too.
    clientErrorHandler: (err: ClientError, socket: Socket) => {
      // The response of the request being read on this socket, if one is (the last one's once it has finished is not).
      const last = answering.get(socket);
      const inFlight = last && !last.writableFinished ? last : undefined;
      const inFlightUrl = inFlight?.req?.url;
      const answer = clientErrorToHttp(err, {
        isServedPath: (path) => isResourcePath(app, path) || (invoke !== undefined && InvokeHandler.matches(path)),
        inApiBody: inFlightUrl !== undefined && isResourcePath(app, pathOf(inFlightUrl)),
      });
      deps.logger.debug({ code: err.code, status: answer?.status }, 'client error');
      if (answer && socket.writable && !inFlight?.headersSent) answerOnSocket(socket, answer);
      socket.destroy();
    },
  });

  recordRoutes(app);

  // Fn decodes API bodies as JSON whatever the Content-Type says (curl -d
  // sends form encoding), so every body is taken as bytes and parsed by models/.
  app.removeAllContentTypeParsers();
  app.addContentTypeParser('*', { parseAs: 'buffer' }, (_req, payload, done) => done(null, payload));

  app.setErrorHandler((err, req, reply) => {
    if (req.raw.socket?.destroyed === true) {
      // The client hung up (mid-upload, say): its doing, and nobody is left to answer.
      if (isClientAbort(err)) req.log.debug({ method: req.method, url: req.url }, 'connection closed before the request body was read');
      else toHttpError(err, req.log);
      reply.hijack();
      reply.raw.destroy();
      return;
    }
    const answer = toHttpError(err, req.log);
    return reply.code(answer.status).headers(answer.headers).send(answer.body);
  });

  app.setNotFoundHandler((req, reply) => {
    // Node parses methods Fastify has no routes for (BIND, LINK, ...): on an API path that is Fn's 405.
    const path = pathOf(req.url);
    const d = isResourcePath(app, path) ? E.MethodNotAllowed : E.PathNotFound;
    const answer = toHttpError(routeError(d, req.method, path), req.log);
    return reply.code(answer.status).send(answer.body);
  });

  // Before any route: a stranger's request is refused before anything answers it.
  if (tokens) guardApi(app, { tokens: tokens.registry, metricsAuth: config.auth.metricsAuth }, deps.api?.datastore);

  if (metrics) {
    // Fn's api_latency: every API request, under its route template (bounded), never its URL.
    app.addHook('onResponse', async (req, reply) => {
      metrics.apiRequest(req.routeOptions.url ?? 'unmatched', req.method, reply.statusCode, reply.elapsedTime);
    });
    resource(app, '/metrics', {
      GET: async (_req, reply) => {
        const text = await metrics.text();
        return reply.type(metrics.contentType).send(text);
      },
    });
  }

  const served = deps.api;
  resource(app, '/', {
    // API clients get Fn's answer; a browser (asking for HTML first) is sent to the console where one is served.
    GET: async (req, reply) => (served && wantsHtml(req) ? reply.redirect('/ui', 302) : { goto: 'https://github.com/fnproject/fn', hello: 'world!' }),
  });
  resource(app, '/version', { GET: async () => ({ version: VERSION }) });
  const readiness = new Readiness(deps.checks ?? [], { log: deps.logger.child({ module: 'health' }) });
  registerProbes(app, readiness);

  if (served) {
    registerConsole(app, {
      metrics,
      readiness,
      datastore: served.datastore,
      role: config.nodeType,
      runsCalls: invoke !== undefined,
      fleet: config.consoleFleet,
      principal: (req) => req.principal,
      auth: tokens !== undefined,
      onError: (err) => deps.logger.warn({ err, module: 'console' }, 'console figures could not be read'),
    });
    registerApi(app, {
      datastore: served.datastore,
      publicUrl: config.publicUrl,
      ...(served.changes ? { changes: served.changes } : {}),
    });
    if (served.changes) {
      const changeLog = new ChangeLog(served.changes);
      // Before the server waits for requests in flight: long polls answer at once.
      app.addHook('preClose', async () => changeLog.close());
      registerChangesApi(app, changeLog);
    }
    if (tokens) registerTokensApi(app, tokens);
    if (served.calls) registerCallsApi(app, { datastore: served.datastore, calls: served.calls, ...(served.queue ? { queue: served.queue } : {}) });
    if (served.secrets) registerSecretsApi(app, { datastore: served.datastore, secrets: served.secrets, ...(served.changes ? { changes: served.changes } : {}) });
  }

  await app.ready();
  return app;
}
