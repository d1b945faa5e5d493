/**
 * auth/ — API tokens: their shape, roles and rights (token.ts), the tokens a
 * node accepts (registry.ts), the first admin token (admin.ts), and
 * invoke-auth (invoke.ts). server/ guards the routes with them.
 */
export { bearerToken, carriesTokenShape, digestOf, isRole, mayUseApp, newToken, rightFor, roleHas, ROLES, sameDigest, tokenId } from './token.js';
export type { Principal, Right, Role } from './token.js';
export { REFRESH_MSECS, TokenRegistry } from './registry.js';
export type { Refusal, TokenCheck, TokenRegistryOptions, Verdict } from './registry.js';
export { LocalInvokeGuard } from './invoke.js';
export type { InvokeGuard, InvokeVerdict } from './invoke.js';
export { ensureAdminToken } from './admin.js';
