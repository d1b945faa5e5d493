/**
 * Routing helpers shared by the API routes: one route per path answering
 * every method (so an unsupported one gets Fn's 405 rather than a 404), Fn's
 * paging parameters, and the endpoint URLs shown in annotations.
 */
import type { FastifyInstance, FastifyReply, FastifyRequest, HTTPMethods } from 'fastify';
import { E, routeError } from '../models/index.js';

export type Handler = (req: FastifyRequest, reply: FastifyReply) => Promise<unknown>;
type Method = 'GET' | 'POST' | 'PUT' | 'DELETE';

/**
 * Registers `path` for every HTTP method Fastify knows; the ones in `handlers`
 * are served (HEAD as GET), the rest answer 405 "Method not allowed: M /path".
 */
export function resource(app: FastifyInstance, path: string, handlers: Partial<Record<Method, Handler>>): void {
  app.route({
    method: app.supportedMethods as HTTPMethods[],
    url: path,
    handler: async (req, reply) => {
      const method = req.method === 'HEAD' ? 'GET' : (req.method as Method);
      const handler = handlers[method];
      if (!handler) throw routeError(E.MethodNotAllowed, req.method, req.url.split('?', 1)[0] ?? req.url);
      return handler(req, reply);
    },
  });
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
