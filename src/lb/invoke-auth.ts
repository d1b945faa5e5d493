/**
 * invoke-auth on an LB: the LB holds no tokens, so it asks the API node
 * (POST /v2/runner/tokens/check, with its own FN_TOKEN) whether a caller's
 * Authorization header may invoke an app, and keeps each answer for
 * REFRESH_MSECS: a revoked token stops working here within a second, as on
 * the API node, and a burst of calls with one token asks once. Answers are
 * keyed by the header's digest, never kept in clear.
 *
 * A token of fnts's never reaches a function. Those of fnts's shape are
 * told at once; the API node's FNTS_ADMIN_TOKEN may have any shape, so the
 * LB reads the digests of such tokens (GET /v2/runner/tokens/unshaped) at
 * start and every UNSHAPED_REFRESH_MS, and withholds a Bearer header whose
 * digest is among them. Until a first list is read, every Bearer header
 * not of fnts's shape is withheld (the admin token must not leak while the
 * API node is away); an API node without the endpoint (Fn's own, or one
 * without API tokens) has none.
 */
import { setTimeout as sleep } from 'node:timers/promises';
import type { Logger } from 'pino';
import { bearerToken, carriesTokenShape, digestOf, REFRESH_MSECS, type InvokeGuard, type InvokeVerdict } from '../auth/index.js';
import { ApiError, E } from '../models/index.js';
import { askApi } from './lookup.js';

const VERDICTS: readonly InvokeVerdict[] = ['ok', 'missing', 'invalid', 'forbidden'];
/** Answers kept at most; past it the oldest go first. */
const MAX_KEPT = 10_000;
/** How often the digests of the API node's tokens not of fnts's shape are read again (they change when its FNTS_ADMIN_TOKEN does: a restart). */
export const UNSHAPED_REFRESH_MS = 5_000;
/** After a failed read, the next comes this long later. */
const UNSHAPED_RETRY_MS = 1_000;
const SHA256_HEX = /^[0-9a-f]{64}$/;

export class RemoteInvokeGuard implements InvokeGuard {
  private readonly base: string;
  private readonly kept = new Map<string, { at: number; verdict: Promise<InvokeVerdict> }>();
  /** Digests of the API node's tokens not of fnts's shape; undefined until first read. */
  private unshaped: ReadonlySet<string> | undefined;
  private readonly stop = new AbortController();
  private loop: Promise<void> | undefined;

  private readonly ttlMs: number;
  private readonly timeoutMs: number;
  private readonly log: Logger | undefined;

  constructor(
    apiUrl: string,
    private readonly token: string | undefined,
    o: { readonly ttlMs?: number; readonly timeoutMs?: number; readonly log?: Logger } = {},
  ) {
    this.base = apiUrl.replace(/\/+$/, '');
    this.ttlMs = o.ttlMs ?? REFRESH_MSECS;
    this.timeoutMs = o.timeoutMs ?? 5_000;
    this.log = o.log;
  }

  /** Reads the API node's unshaped token digests now, then every UNSHAPED_REFRESH_MS until close(). */
  start(refreshMs = UNSHAPED_REFRESH_MS, retryMs = UNSHAPED_RETRY_MS): void {
    this.loop ??= (async () => {
      let failing = false;
      while (!this.stop.signal.aborted) {
        const read = await this.readUnshaped().then(
          () => true,
          (err: unknown) => {
            if (!this.stop.signal.aborted && !failing) {
              this.log?.warn(
                { err: err instanceof Error ? err.message : String(err) },
                this.unshaped === undefined
                  ? "could not read the API node's admin token digest: Bearer headers not shaped like fnts's tokens are kept from functions until it is read"
                  : "could not read the API node's admin token digest again: the last one read stays in force",
              );
            }
            return false;
          },
        );
        failing = !read;
        // timers/promises removes its abort listener when the time is up.
        await sleep(read ? refreshMs : retryMs, undefined, { signal: this.stop.signal, ref: false }).catch(() => undefined);
      }
    })();
  }

  async close(): Promise<void> {
    this.stop.abort();
    await this.loop;
  }

  private async readUnshaped(): Promise<void> {
    const { status, ok, json } = await askApi(this.base, this.token, '/v2/runner/tokens/unshaped', {
      timeoutMs: this.timeoutMs,
      what: 'for its admin token digest',
      signal: this.stop.signal,
    });
    // No such endpoint: Fn's own API node, or one without API tokens (FNTS_AUTH=off): it accepts no token to withhold.
    if (status === 404) {
      this.unshaped = new Set();
      return;
    }
    const digests = json?.['digests'];
    if (!ok || !Array.isArray(digests) || digests.length > 16 || !digests.every((d) => typeof d === 'string' && SHA256_HEX.test(d))) {
      throw new Error(`unexpected answer (${status}) from GET /v2/runner/tokens/unshaped`);
    }
    this.unshaped = new Set(digests as string[]);
  }

  verdict(authorization: string | undefined, appName: string): InvokeVerdict | Promise<InvokeVerdict> {
    if (authorization === undefined || authorization === '') return 'missing';
    const key = `${digestOf(authorization)} ${appName}`;
    const now = performance.now();
    const hit = this.kept.get(key);
    if (hit && now - hit.at < this.ttlMs) return hit.verdict;
    const verdict = this.ask(authorization, appName);
    this.kept.delete(key);
    this.kept.set(key, { at: now, verdict });
    // A failed question is not kept: the next call asks again.
    void verdict.catch(() => {
      if (this.kept.get(key)?.verdict === verdict) this.kept.delete(key);
    });
    if (this.kept.size > MAX_KEPT) this.kept.delete(this.kept.keys().next().value!);
    return verdict;
  }

  /**
   * Shaped like a token of fnts's, or one of the API node's tokens of
   * another shape (its FNTS_ADMIN_TOKEN); any Bearer token until the API
   * node has said which those are.
   */
  carriesToken(authorization: string): boolean {
    if (carriesTokenShape(authorization)) return true;
    const token = bearerToken(authorization);
    if (token === undefined) return false;
    const unshaped = this.unshaped;
    if (unshaped === undefined) return true;
    return unshaped.size > 0 && unshaped.has(digestOf(token));
  }

  private async ask(authorization: string, app: string): Promise<InvokeVerdict> {
    const { status, ok, json } = await askApi(this.base, this.token, '/v2/runner/tokens/check', {
      method: 'POST',
      body: { authorization, app },
      timeoutMs: this.timeoutMs,
      what: "to check the caller's token",
    });
    const verdict = json?.['verdict'] as InvokeVerdict;
    if (!ok || !VERDICTS.includes(verdict)) {
      throw new ApiError(E.ServiceUnavailable, { message: `the API node (FN_RUNNER_API_URL=${this.base}) could not check the caller's token (${status})` });
    }
    return verdict;
  }
}
