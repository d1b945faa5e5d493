/**
 * API tokens: what one looks like, what it may do, and how it is checked.
 *
 * A token is `fnts_<id>_<secret>`: the id (16 hex digits) finds its row,
 * the secret (32 random bytes, base64url) is what proves it. Only the
 * SHA-256 digest of the whole token is stored. A token is high-entropy,
 * so a fast digest is enough (a slow KDF per request would let a burst of
 * wrong tokens slow the right ones), and digests are compared in constant
 * time. An operator's own token (FNTS_ADMIN_TOKEN) has no id: it is
 * compared the same way against its digest.
 */
import { createHash, randomBytes, timingSafeEqual } from 'node:crypto';

/** What a token may do (docs/operations.md#tokens). */
export const ROLES = ['admin', 'developer', 'viewer', 'invoker', 'fleet'] as const;
export type Role = (typeof ROLES)[number];

/**
 * - read: GET on the management API (apps, fns, triggers, calls, logs, secrets' names)
 * - write: create, change, delete apps, fns, triggers, secrets; redrive calls
 * - invoke: call fns whose app or fn asks for a token (fnts.io/invoke-auth)
 * - tokens: manage tokens
 * - fleet: the API node's /v2/runner/... endpoints (LBs hand in records, check callers' tokens)
 */
export type Right = 'read' | 'write' | 'invoke' | 'tokens' | 'fleet';

const RIGHTS: Readonly<Record<Role, ReadonlySet<Right>>> = {
  admin: new Set<Right>(['read', 'write', 'invoke', 'tokens', 'fleet']),
  developer: new Set<Right>(['read', 'write', 'invoke']),
  viewer: new Set<Right>(['read']),
  invoker: new Set<Right>(['invoke']),
  // An LB: reads apps, fns and triggers to place calls, hands in records, checks its callers' tokens.
  fleet: new Set<Right>(['read', 'fleet']),
};

export function isRole(value: unknown): value is Role {
  return typeof value === 'string' && (ROLES as readonly string[]).includes(value);
}

export function roleHas(role: Role, right: Right): boolean {
  return RIGHTS[role].has(right);
}

/** Who a verified token speaks for. */
export interface Principal {
  /** The token's id ('env' for FNTS_ADMIN_TOKEN). */
  readonly tokenId: string;
  readonly name: string;
  readonly role: Role;
  /** The app names it is limited to; undefined = every app. */
  readonly apps: readonly string[] | undefined;
}

/** May `who` touch app `appName`? */
export function mayUseApp(who: Principal, appName: string): boolean {
  return who.apps === undefined || who.apps.includes(appName);
}

/**
 * The right a management request needs, from its method and route template:
 * tokens need `tokens`, the fleet's endpoints `fleet`, reads `read`, the rest
 * `write`.
 */
export function rightFor(method: string, route: string): Right {
  if (route === '/v2/tokens' || route.startsWith('/v2/tokens/')) return 'tokens';
  if (route.startsWith('/v2/runner/')) return 'fleet';
  return method === 'GET' ? 'read' : 'write';
}

const TOKEN = /^fnts_([0-9a-f]{16})_[A-Za-z0-9_-]{43}$/;

/** A new token: its id, the whole token (shown once) and the digest kept of it. */
export function newToken(): { id: string; token: string; digest: string } {
  const id = randomBytes(8).toString('hex');
  const token = `fnts_${id}_${randomBytes(32).toString('base64url')}`;
  return { id, token, digest: digestOf(token) };
}

/** The id in a token of ours, or undefined when it is not shaped like one. */
export function tokenId(token: string): string | undefined {
  return TOKEN.exec(token)?.[1];
}

/** SHA-256 of a token, hex: what is stored and compared. */
export function digestOf(token: string): string {
  return createHash('sha256').update(token).digest('hex');
}

/** Constant-time equality of two hex digests (of equal length: both SHA-256). */
export function sameDigest(a: string, b: string): boolean {
  const x = Buffer.from(a, 'hex');
  const y = Buffer.from(b, 'hex');
  return x.length === y.length && x.length > 0 && timingSafeEqual(x, y);
}

/**
 * The token of an Authorization header: `Bearer <token>`, the scheme word in
 * any case, one space or more between. undefined for anything else (no
 * header, another scheme, `Bearer` alone, a token longer than any of ours
 * could be).
 */
export function bearerToken(header: string | undefined): string | undefined {
  if (header === undefined || header.length > MAX_HEADER_CHARS) return undefined;
  const m = /^bearer +([!-~]+) *$/i.exec(header);
  return m?.[1];
}

/** Whether an Authorization header carries a token shaped like one of fnts's (`Bearer fnts_<id>_<secret>`). */
export function carriesTokenShape(authorization: string): boolean {
  const token = bearerToken(authorization);
  return token !== undefined && tokenId(token) !== undefined;
}

/** FNTS_ADMIN_TOKEN may be up to this long; no token of ours is near it. */
const MAX_HEADER_CHARS = 1024;
