/**
 * TokenRegistry: the tokens a node accepts, held in memory and read again
 * from the database every REFRESH_MSECS, so that checking a request's
 * token never waits for the database (a map lookup and a constant-time
 * digest compare) and a token revoked on any node sharing the database
 * stops working here within a second. Changes made through this node
 * (create, revoke) are seen at once.
 */
import type { Logger } from 'pino';
import type { TokenRecord, TokenStore } from '../datastore/index.js';
import { bearerToken, digestOf, isRole, sameDigest, tokenId, type Principal } from './token.js';

/** How often the token list is read again: revocation reaches every node within this plus a read. */
export const REFRESH_MSECS = 500;

/** Why a request's credentials were not accepted (each answers 401). */
export type Refusal = 'missing' | 'invalid';

export type Verdict = { readonly ok: true; readonly principal: Principal } | { readonly ok: false; readonly refusal: Refusal };

/** Something that checks an Authorization header: the registry on nodes with a database, a remote check on LBs. */
export interface TokenCheck {
  check(authorization: string | undefined): Verdict | Promise<Verdict>;
}

interface Known {
  readonly digest: string;
  readonly principal: Principal;
  /** ms since the epoch; Infinity = never. */
  readonly expiresAt: number;
}

const ADMIN_FROM_ENV: Principal = Object.freeze({ tokenId: 'env', name: 'FNTS_ADMIN_TOKEN', role: 'admin', apps: undefined });
/** Compared against when the id is unknown, so that a miss costs what a hit does. */
const NO_DIGEST = digestOf('');

export interface TokenRegistryOptions {
  readonly store: TokenStore;
  readonly log: Logger;
  /** FNTS_ADMIN_TOKEN: accepted as an admin token besides the stored ones. */
  readonly adminToken?: string | undefined;
  readonly refreshMs?: number;
  readonly now?: () => number;
}

export class TokenRegistry implements TokenCheck {
  private known = new Map<string, Known>();
  private readonly adminDigest: string | undefined;
  private readonly now: () => number;
  private timer: NodeJS.Timeout | undefined;
  private reading: Promise<void> | undefined;
  private failing = false;

  constructor(private readonly options: TokenRegistryOptions) {
    this.adminDigest = options.adminToken === undefined ? undefined : digestOf(options.adminToken);
    this.now = options.now ?? Date.now;
  }

  /** Reads the tokens, then keeps reading them every refreshMs until close(). */
  async start(): Promise<void> {
    await this.refresh();
    const every = this.options.refreshMs ?? REFRESH_MSECS;
    this.timer = setInterval(() => void this.refresh().catch(() => undefined), every);
    this.timer.unref();
  }

  close(): void {
    clearInterval(this.timer);
    this.timer = undefined;
  }

  /** Reads the token list again (one read at a time; a caller during a read waits for the next). */
  async refresh(): Promise<void> {
    const previous = this.reading;
    const next = (async () => {
      await previous?.catch(() => undefined);
      let rows: TokenRecord[];
      try {
        rows = await this.options.store.listTokens();
      } catch (err) {
        // The last list stays in force (a revoked token may live until the database answers again): said once per outage.
        if (!this.failing) this.options.log.warn({ err }, 'could not read the API tokens; the last list read stays in force until the database answers');
        this.failing = true;
        throw err;
      }
      if (this.failing) this.options.log.info('the API tokens are read again');
      this.failing = false;
      const known = new Map<string, Known>();
      for (const r of rows) {
        if (!isRole(r.role)) continue;
        const expiresAt = r.expires_at === undefined ? Infinity : Date.parse(r.expires_at);
        known.set(r.id, { digest: r.digest, expiresAt: Number.isNaN(expiresAt) ? 0 : expiresAt, principal: Object.freeze({ tokenId: r.id, name: r.name, role: r.role, apps: r.apps }) });
      }
      this.known = known;
    })();
    this.reading = next;
    try {
      await next;
    } finally {
      if (this.reading === next) this.reading = undefined;
    }
  }

  /**
   * Digests of the tokens accepted here that are not of fnts's shape (at
   * most FNTS_ADMIN_TOKEN's): an LB, which holds no tokens, reads them to
   * keep such a token from functions (lb/invoke-auth.ts).
   */
  unshapedDigests(): string[] {
    const admin = this.options.adminToken;
    return admin !== undefined && tokenId(admin) === undefined && this.adminDigest !== undefined ? [this.adminDigest] : [];
  }

  /** Whether a stored admin token exists (as of the last read). */
  hasStoredAdmin(): boolean {
    for (const k of this.known.values()) if (k.principal.role === 'admin' && k.expiresAt > this.now()) return true;
    return false;
  }

  check(authorization: string | undefined): Verdict {
    if (authorization === undefined || authorization === '') return { ok: false, refusal: 'missing' };
    const token = bearerToken(authorization);
    if (token === undefined) return { ok: false, refusal: 'invalid' };
    const presented = digestOf(token);
    if (this.adminDigest !== undefined && sameDigest(presented, this.adminDigest)) return { ok: true, principal: ADMIN_FROM_ENV };
    const id = tokenId(token);
    if (id === undefined) return { ok: false, refusal: 'invalid' };
    const known = this.known.get(id);
    const match = sameDigest(presented, known?.digest ?? NO_DIGEST);
    if (!known || !match || known.expiresAt <= this.now()) return { ok: false, refusal: 'invalid' };
    return { ok: true, principal: known.principal };
  }
}
