/**
 * The token tests use. Auth is on by default (FNTS_AUTH=on): every test
 * server gets FNTS_ADMIN_TOKEN=TEST_ADMIN_TOKEN, and the helpers send it on
 * /v2 requests unless a test sends an Authorization header of its own (or
 * none: `{ authorization: '' }`). Tests about auth make their own tokens.
 */
import { pino } from 'pino';
import { TokenRegistry } from '../../src/auth/index.js';
import type { SqlDatastore } from '../../src/datastore/index.js';

export const TEST_ADMIN_TOKEN = 'fnts-test-admin-token-0123456789abcdef0123456789abcdef';

/**
 * The settings every test server starts with (a test's own env may change
 * them): the admin token, which LBs also send to their API node (FN_TOKEN).
 */
export const TEST_AUTH_ENV: Readonly<Record<string, string>> = { FNTS_ADMIN_TOKEN: TEST_ADMIN_TOKEN, FN_TOKEN: TEST_ADMIN_TOKEN };

/** `Authorization: Bearer <token>`. */
export function bearer(token: string = TEST_ADMIN_TOKEN): Record<string, string> {
  return { authorization: `Bearer ${token}` };
}

/**
 * `headers` with the test admin token added for a /v2 path (or URL), unless they
 * carry an Authorization header already; `authorization: ''` sends none.
 */
export function withTestToken(pathOrUrl: string, headers: Record<string, string> = {}): Record<string, string> {
  const path = /^https?:/.test(pathOrUrl) ? new URL(pathOrUrl).pathname : pathOrUrl;
  const own = Object.keys(headers).find((k) => k.toLowerCase() === 'authorization');
  if (own !== undefined) {
    if (headers[own] !== '') return headers;
    const rest = { ...headers };
    delete rest[own];
    return rest;
  }
  return path.startsWith('/v2') ? { ...headers, ...bearer() } : headers;
}

/** Tokens for an in-process API (test/support/api.ts, raw.ts): the test admin token, over the datastore's own token table. */
export async function testTokens(datastore: SqlDatastore): Promise<{ store: SqlDatastore['tokens']; registry: TokenRegistry }> {
  const registry = new TokenRegistry({ store: datastore.tokens, log: pino({ level: 'silent' }), adminToken: TEST_ADMIN_TOKEN });
  await registry.start();
  return { store: datastore.tokens, registry };
}
