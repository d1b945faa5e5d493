/**
 * invoke-auth on an LB: the LB holds no tokens, so it asks the API node
 * (POST /v2/runner/tokens/check, with its own FN_TOKEN) whether a caller's
 * Authorization header may invoke an app, and keeps each answer for
 * REFRESH_MSECS: a revoked token stops working here within a second, as on
 * the API node, and a burst of calls with one token asks once. Answers are
 * keyed by the header's digest, never kept in clear.
 */
import { carriesTokenShape, digestOf, REFRESH_MSECS, type InvokeGuard, type InvokeVerdict } from '../auth/index.js';
import { ApiError, E } from '../models/index.js';
import { askApi } from './lookup.js';

const VERDICTS: readonly InvokeVerdict[] = ['ok', 'missing', 'invalid', 'forbidden'];
/** Answers kept at most; past it the oldest go first. */
const MAX_KEPT = 10_000;

export class RemoteInvokeGuard implements InvokeGuard {
  private readonly base: string;
  private readonly kept = new Map<string, { at: number; verdict: Promise<InvokeVerdict> }>();

  constructor(
    apiUrl: string,
    private readonly token: string | undefined,
    private readonly ttlMs = REFRESH_MSECS,
    private readonly timeoutMs = 5_000,
  ) {
    this.base = apiUrl.replace(/\/+$/, '');
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

  /** Shaped like a token of fnts's (the LB holds no tokens; an FNTS_ADMIN_TOKEN of another shape is known only to API nodes). */
  carriesToken(authorization: string): boolean {
    return carriesTokenShape(authorization);
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
