/**
 * invoke-auth: an app or fn annotated `fnts.io/invoke-auth: "token"`
 * (models/annotations.ts) takes calls only from tokens with the invoke
 * right (invoker, developer, admin) for its app. Checked once the fn is
 * known and before the call's body is read; anything else invokes as in
 * Fn, with no token.
 */
import { carriesTokenShape, mayUseApp, roleHas } from './token.js';
import type { TokenCheck, Verdict } from './registry.js';

/** ok, or why not: missing and invalid answer 401, forbidden 403. */
export type InvokeVerdict = 'ok' | 'missing' | 'invalid' | 'forbidden';

export interface InvokeGuard {
  verdict(authorization: string | undefined, appName: string): InvokeVerdict | Promise<InvokeVerdict>;
  /**
   * Whether an Authorization header carries a token of fnts's (at once, no
   * round trip): it was for fnts, so it must not reach a function, invoke-auth
   * or not; a function's own schemes (Basic, its own bearer tokens) do.
   */
  carriesToken(authorization: string): boolean;
}

function decide(v: Verdict, appName: string): InvokeVerdict {
  if (!v.ok) return v.refusal;
  return roleHas(v.principal.role, 'invoke') && mayUseApp(v.principal, appName) ? 'ok' : 'forbidden';
}

/** On nodes that hold the tokens (full, api). */
export class LocalInvokeGuard implements InvokeGuard {
  constructor(private readonly tokens: TokenCheck) {}
  verdict(authorization: string | undefined, appName: string): InvokeVerdict | Promise<InvokeVerdict> {
    const v = this.tokens.check(authorization);
    return v instanceof Promise ? v.then((x) => decide(x, appName)) : decide(v, appName);
  }

  /** Shaped like a token of fnts's, or a token this node knows (FNTS_ADMIN_TOKEN may have any shape). */
  carriesToken(authorization: string): boolean {
    if (carriesTokenShape(authorization)) return true;
    const v = this.tokens.check(authorization);
    return !(v instanceof Promise) && v.ok;
  }
}
