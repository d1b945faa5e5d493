/**
 * Managing API tokens (admin only; server/auth.ts checks the right):
 *
 *   POST   /v2/tokens             {"name","role","apps":[...],"expires_at"}: the token, shown this once
 *   GET    /v2/tokens             every token, without secrets
 *   GET    /v2/tokens/{tokenID}
 *   DELETE /v2/tokens/{tokenID}   revokes it (every node sharing the database within a second)
 *
 * And for LBs (the fleet right), which hold no tokens:
 *   POST /v2/runner/tokens/check     whether its caller's token may invoke an app (invoke-auth on the LB path)
 *   GET  /v2/runner/tokens/unshaped  {"digests":[...]}: SHA-256 of the tokens accepted here not shaped like
 *                                    fnts's (FNTS_ADMIN_TOKEN's, when it is not), so that the LB keeps them from functions
 */
import type { FastifyInstance } from 'fastify';
import { isRole, LocalInvokeGuard, newToken, type TokenRegistry } from '../auth/index.js';
import type { TokenRecord, TokenStore } from '../datastore/index.js';
import { ApiError, E, MAX_NAME_LENGTH, parseJsonObject } from '../models/index.js';
import { param, resource } from './routing.js';

export interface TokensApiDeps {
  readonly store: TokenStore;
  readonly registry: TokenRegistry;
}

/** A token as listed: everything but its digest. */
export function tokenToJson(t: TokenRecord): Record<string, unknown> {
  return { id: t.id, name: t.name, role: t.role, ...(t.apps ? { apps: t.apps } : {}), created_at: t.created_at, ...(t.expires_at ? { expires_at: t.expires_at } : {}) };
}

const RFC3339 = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?(Z|[+-]\d{2}:\d{2})$/;

/** Validates a token request; the answer's fields as stored (ids and digest aside). */
function tokenRequest(body: Record<string, unknown>, now: number): Pick<TokenRecord, 'name' | 'role' | 'apps' | 'expires_at'> {
  const { name, role, apps, expires_at } = body;
  if (typeof name !== 'string' || name.length === 0 || name.length > MAX_NAME_LENGTH) throw new ApiError(E.InvalidTokenName);
  if (!isRole(role)) throw new ApiError(E.InvalidTokenRole);
  if (
    apps !== undefined &&
    apps !== null &&
    (!Array.isArray(apps) || apps.length === 0 || apps.length > 1000 || !apps.every((a) => typeof a === 'string' && a.length > 0 && a.length <= MAX_NAME_LENGTH))
  ) {
    throw new ApiError(E.InvalidTokenApps);
  }
  let expires: string | undefined;
  if (expires_at !== undefined && expires_at !== null && expires_at !== '') {
    const at = typeof expires_at === 'string' && RFC3339.test(expires_at) ? Date.parse(expires_at) : NaN;
    if (Number.isNaN(at) || at <= now) throw new ApiError(E.InvalidTokenExpiry);
    expires = new Date(at).toISOString();
  }
  return { name, role, apps: Array.isArray(apps) ? [...new Set(apps as string[])] : undefined, expires_at: expires };
}

export function registerTokensApi(app: FastifyInstance, { store, registry }: TokensApiDeps): void {
  const byId = async (id: string): Promise<TokenRecord> => {
    const t = (await store.listTokens()).find((x) => x.id === id);
    if (!t) throw new ApiError(E.TokenNotFound);
    return t;
  };

  resource(app, '/v2/tokens', {
    GET: async () => ({ items: (await store.listTokens()).map(tokenToJson) }),
    POST: async (req) => {
      const now = Date.now();
      const fields = tokenRequest(parseJsonObject(req.body as Buffer | undefined), now);
      const { id, token, digest } = newToken();
      const record: TokenRecord = { id, ...fields, digest, created_at: new Date(now).toISOString() };
      await store.insertToken(record);
      await registry.refresh();
      req.log.info({ tokenId: id, name: record.name, role: record.role, by: req.principal?.tokenId }, 'API token created');
      return { ...tokenToJson(record), token };
    },
  });

  resource(app, '/v2/tokens/:tokenID', {
    GET: async (req) => tokenToJson(await byId(param(req, 'tokenID'))),
    DELETE: async (req, reply) => {
      const id = param(req, 'tokenID');
      if (!(await store.removeToken(id))) throw new ApiError(E.TokenNotFound);
      await registry.refresh();
      req.log.info({ tokenId: id, by: req.principal?.tokenId }, 'API token revoked');
      return reply.code(204).send();
    },
  });

  // An LB's question for invoke-auth: may this Authorization header invoke that app? The verdict only, never the token's details.
  resource(app, '/v2/runner/tokens/check', {
    POST: async (req) => {
      const body = parseJsonObject(req.body as Buffer | undefined);
      const { authorization, app: appName } = body;
      if (typeof authorization !== 'string' || typeof appName !== 'string') throw new ApiError(E.InvalidJSON, { message: 'Invalid JSON: authorization and app must be strings' });
      return { verdict: await new LocalInvokeGuard(registry).verdict(authorization, appName) };
    },
  });

  resource(app, '/v2/runner/tokens/unshaped', {
    GET: async () => ({ digests: registry.unshapedDigests() }),
  });
}
