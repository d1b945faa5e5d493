/**
 * The HTTP server: builds the Fastify app for a role and wires errors,
 * unknown paths and bodies the way Fn answers them.
 */
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import { createRequire } from 'node:module';
import Fastify, { LogController, type FastifyBaseLogger, type FastifyInstance, type FastifyReply } from 'fastify';
import type { Config } from '../config/index.js';
import type { Datastore } from '../datastore/index.js';
import { E, routeError } from '../models/index.js';
import { registerApi, type ResourceChange } from './api.js';
import { toHttpError } from './errors.js';
import { InvokeHandler } from './invoke.js';

const pkg = createRequire(import.meta.url)('../../package.json') as { version: string };
export const VERSION: string = pkg.version;

export interface ServerDeps {
  readonly config: Config;
  readonly datastore: Datastore;
  readonly logger: FastifyBaseLogger;
  readonly onChange?: (change: ResourceChange) => void;
  /** Serves /invoke and /t when this role runs functions. */
  readonly invoke?: InvokeHandler;
}

export async function buildServer(deps: ServerDeps): Promise<FastifyInstance> {
  const { config, invoke } = deps;
  const app = Fastify({
    // Calls skip Fastify: every microsecond on that path shows in latency.
    serverFactory: (handler) =>
      createServer((req, res) => {
        if (invoke && InvokeHandler.matches(req.url ?? '')) invoke.handle(req, res);
        else handler(req, res);
      }).on('checkContinue', (req: IncomingMessage, res: ServerResponse) => {
        // Expect: 100-continue. A call whose body is declared too big is refused before it is sent.
        if (invoke && InvokeHandler.matches(req.url ?? '')) {
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
    routerOptions: { ignoreTrailingSlash: true, maxParamLength: 1024 },
    // Errors Fastify raises before routing (a malformed URL, say) skip the
    // error handler below; answer them through the same mapper.
    frameworkErrors: (err, req, reply) => {
      const answer = toHttpError(err, req.log);
      void (reply as FastifyReply).code(answer.status).headers(answer.headers).send(answer.body);
    },
  });

  // Fn decodes API bodies as JSON whatever the Content-Type says (curl -d
  // sends form encoding), so every body is taken as bytes and parsed by models/.
  app.removeAllContentTypeParsers();
  app.addContentTypeParser('*', { parseAs: 'buffer' }, (_req, payload, done) => done(null, payload));

  app.setErrorHandler((err, req, reply) => {
    const answer = toHttpError(err, req.log);
    return reply.code(answer.status).headers(answer.headers).send(answer.body);
  });

  app.setNotFoundHandler((req, reply) => {
    const answer = toHttpError(routeError(E.PathNotFound, req.method, req.url.split('?', 1)[0] ?? req.url), req.log);
    return reply.code(answer.status).send(answer.body);
  });

  app.get('/', async () => ({ hello: 'world!' }));
  app.get('/version', async () => ({ version: VERSION }));

  registerApi(app, {
    datastore: deps.datastore,
    publicUrl: config.publicUrl,
    onChange: (change) => {
      invoke?.changed(change);
      deps.onChange?.(change);
    },
  });

  await app.ready();
  return app;
}
