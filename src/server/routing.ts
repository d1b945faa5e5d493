/**
 * Routing helpers shared by the API routes: one route per path answering
 * every method (so an unsupported one gets Fn's 405 rather than a 404), Fn's
 * paging parameters, and the endpoint URLs shown in annotations.
 */
import type { FastifyInstance, FastifyReply, FastifyRequest, HTTPMethods } from 'fastify';
import { E, routeError } from '../models/index.js';

export type Handler = (req: FastifyRequest, reply: FastifyReply) => Promise<unknown>;
type Method = 'GET' | 'POST' | 'PUT' | 'DELETE';

/** Every route each app has, as registered (server.ts records them): what the auth test walks. */
const allRoutes = new WeakMap<FastifyInstance, { url: string; methods: string[] }[]>();

/** Records every route `app` gets from now on. */
export function recordRoutes(app: FastifyInstance): void {
  const routes: { url: string; methods: string[] }[] = [];
  allRoutes.set(app, routes);
  app.addHook('onRoute', (r) => void routes.push({ url: r.url, methods: ([] as string[]).concat(r.method) }));
}

/** The routes `app` registered since recordRoutes(), with their methods. */
export function routesOf(app: FastifyInstance): ReadonlyArray<{ readonly url: string; readonly methods: readonly string[] }> {
  return allRoutes.get(app) ?? [];
}

/** The paths `resource()` registered on each app, as matchers of concrete request paths. */
const resourcePaths = new WeakMap<FastifyInstance, RegExp[]>();

/** `/v2/apps/:appID` matches `/v2/apps/x` and `/v2/apps/x/` (the router ignores a trailing slash). */
function pathMatcher(path: string): RegExp {
  const segments = path.split('/').map((s) => (s.startsWith(':') ? '[^/]+' : s.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')));
  return new RegExp(`^${segments.join('/').replace(/\/$/, '')}/?$`);
}

/**
 * Registers `path` for every HTTP method Fastify knows; the ones in `handlers`
 * are served, the rest answer 405 "Method not allowed: M /path". HEAD is not
 * served as GET: Fn answers it with 405 on every API path.
 */
export function resource(app: FastifyInstance, path: string, handlers: Partial<Record<Method, Handler>>): void {
  let known = resourcePaths.get(app);
  if (!known) resourcePaths.set(app, (known = []));
  known.push(pathMatcher(path));
  app.route({
    method: app.supportedMethods as HTTPMethods[],
    url: path,
    handler: async (req, reply) => {
      const handler = handlers[req.method as Method];
      if (!handler) throw routeError(E.MethodNotAllowed, req.method, pathOf(req.url));
      return handler(req, reply);
    },
  });
}

/**
 * True when `path` (no query) is one `resource()` registered on `app`: a
 * request for it with a method the router has no route for (Node parses
 * more methods than Fastify routes) is Fn's 405, not a 404.
 */
export function isResourcePath(app: FastifyInstance, path: string): boolean {
  return resourcePaths.get(app)?.some((m) => m.test(path)) ?? false;
}

/** A route parameter of the request ('' when absent). */
export function param(req: FastifyRequest, name: string): string {
  return (req.params as Record<string, string>)[name] ?? '';
}

/** The path of a request URL, without its query. */
export function pathOf(url: string): string {
  const q = url.indexOf('?');
  return q < 0 ? url : url.slice(0, q);
}

/** Fn's paging: per_page defaults to 30, is capped at 100; junk means the default. */
export function pageParams(query: unknown): { cursor: string | undefined; perPage: number } {
  const q = (query ?? {}) as Record<string, unknown>;
  const raw = typeof q['per_page'] === 'string' ? q['per_page'] : '';
  const n = /^[+-]?\d+$/.test(raw) ? Number(raw) : 0;
  const perPage = n > 100 ? 100 : n <= 0 ? 30 : n;
  const cursor = typeof q['cursor'] === 'string' && q['cursor'] !== '' ? q['cursor'] : undefined;
  return { cursor, perPage };
}

/** A single query parameter as a string ('' when absent or repeated oddly). */
export function queryString(query: unknown, name: string): string {
  const v = ((query ?? {}) as Record<string, unknown>)[name];
  if (typeof v === 'string') return v;
  if (Array.isArray(v) && typeof v[0] === 'string') return v[0];
  return '';
}

const SAFE_HOST = /^[A-Za-z0-9.\-:[\]]+$/;

/**
 * The base URL endpoint annotations are built on: FN_PUBLIC_LB_URL when set,
 * else the scheme and Host the client used (as Fn does).
 */
export function baseUrl(req: FastifyRequest, publicUrl: string | undefined): string {
  if (publicUrl) return publicUrl;
  const host = req.host && SAFE_HOST.test(req.host) ? req.host : `localhost:${req.socket.localPort ?? 8080}`;
  return `${req.protocol}://${host}`;
}
