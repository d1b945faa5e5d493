/**
 * Tokens on the management API (docs/operations.md#tokens): every request
 * whose path starts with /v2 (and /metrics under FNTS_METRICS_AUTH=on)
 * must carry `Authorization: Bearer <token>`. The check is by path prefix,
 * before routing decides anything, so a route added later cannot slip by,
 * and a stranger learns nothing from it: 401 comes before any 404 or 405.
 *
 * Then the route's template says which right it needs (auth/token.ts:
 * rightFor): a token without it answers 403. A token limited to some apps
 * answers 403 for any other app, and for an id that names nothing: what
 * exists outside its apps is not revealed.
 */
import type { FastifyInstance, FastifyRequest } from 'fastify';
import { mayUseApp, rightFor, roleHas, type Principal, type TokenCheck } from '../auth/index.js';
import type { Datastore } from '../datastore/index.js';
import { ApiError, E, optString, parseJsonObject, type ErrorDef, type JsonObject } from '../models/index.js';
import { pathOf, queryString } from './routing.js';

declare module 'fastify' {
  interface FastifyRequest {
    /** Who the request's token speaks for; set on guarded paths once the token is checked. */
    principal?: Principal;
  }
}

export interface ApiGuard {
  readonly tokens: TokenCheck;
  /** FNTS_METRICS_AUTH=on: /metrics needs a token too (of any role). */
  readonly metricsAuth: boolean;
}

/** The 401 answer: WWW-Authenticate tells a client which scheme to use (RFC 6750). */
export function unauthenticated(d: ErrorDef): ApiError {
  return new ApiError(d, { headers: { 'WWW-Authenticate': d === E.InvalidToken ? 'Bearer error="invalid_token"' : 'Bearer' } });
}

function guarded(path: string, metricsAuth: boolean): boolean {
  return path === '/v2' || path.startsWith('/v2/') || (metricsAuth && path === '/metrics');
}

export function guardApi(app: FastifyInstance, guard: ApiGuard, datastore: Datastore | undefined): void {
  app.decorateRequest('principal', undefined);

  app.addHook('onRequest', async (req) => {
    const path = pathOf(req.url);
    if (!guarded(path, guard.metricsAuth)) return;
    const verdict = await guard.tokens.check(req.headers.authorization);
    if (!verdict.ok) throw unauthenticated(verdict.refusal === 'missing' ? E.Unauthenticated : E.InvalidToken);
    const who = verdict.principal;
    req.principal = who;
    const route = req.routeOptions.url;
    // An unknown path or method answers 404/405 to anyone with a valid token.
    if (route === undefined || path === '/metrics') return;
    const right = rightFor(req.method, route);
    if (!roleHas(who.role, right)) throw new ApiError(E.Forbidden, { message: `${E.Forbidden.message} (role ${who.role})` });
    // Tokens limited to apps neither manage tokens nor act for the fleet: both reach beyond their apps.
    if (who.apps !== undefined && (right === 'tokens' || right === 'fleet')) throw new ApiError(E.Forbidden, { message: `${E.Forbidden.message} (limited to apps)` });
  });

  if (!datastore) return;
  // After the body is parsed: a create names its app in the body.
  app.addHook('preHandler', async (req) => {
    const who = req.principal;
    if (who?.apps === undefined) return;
    const app = await appNameOf(req, datastore);
    if (app === undefined) return;
    if (app === NOWHERE || !mayUseApp(who, app)) throw new ApiError(E.ForbiddenApp);
  });
}

/** An id that names nothing: to a token limited to apps, forbidden like another app's. */
const NOWHERE = Symbol('nowhere');

/**
 * The app a request touches, by name: from the ids in its path, else its
 * query's or body's app_id, else (creating an app) the body's name.
 * undefined: the request touches no one app (lists of apps are filtered by
 * the API itself, a list without app_id is refused by it).
 */
async function appNameOf(req: FastifyRequest, ds: Datastore): Promise<string | typeof NOWHERE | undefined> {
  const params = (req.params ?? {}) as Record<string, string | undefined>;
  const byId = async (appId: string): Promise<string | typeof NOWHERE> => (await found(ds.getAppById(appId)))?.name ?? NOWHERE;
  if (params['appID'] !== undefined) return await byId(params['appID']);
  if (params['fnID'] !== undefined) {
    const fn = await found(ds.getFnById(params['fnID']));
    return fn ? await byId(fn.app_id) : NOWHERE;
  }
  if (params['triggerID'] !== undefined) {
    const t = await found(ds.getTriggerById(params['triggerID']));
    return t ? await byId(t.app_id) : NOWHERE;
  }
  const route = req.routeOptions.url;
  if (route !== '/v2/apps' && route !== '/v2/fns' && route !== '/v2/triggers') return undefined;
  if (req.method === 'GET') {
    const appId = queryString(req.query, 'app_id');
    return route === '/v2/apps' || appId === '' ? undefined : await byId(appId);
  }
  // Read as the API reads it (field names in any case, as Go decodes them): what it would act on is what is checked.
  const body = bodyObject(req.body);
  if (body === undefined) return undefined;
  if (route === '/v2/apps') return optString(body, 'name');
  const appId = optString(body, 'app_id');
  return appId === undefined ? undefined : await byId(appId);
}

/** The record, or undefined when the datastore does not have it (its 404). */
async function found<T>(lookup: Promise<T>): Promise<T | undefined> {
  try {
    return await lookup;
  } catch (err) {
    if (err instanceof ApiError && err.status === 404) return undefined;
    throw err;
  }
}

/** The request's JSON object; undefined when it is not one (the API answers 400 Invalid JSON for it, touching no app). */
function bodyObject(body: unknown): JsonObject | undefined {
  try {
    return parseJsonObject(body as Buffer | undefined);
  } catch {
    return undefined;
  }
}
