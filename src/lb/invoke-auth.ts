/**
 * invoke-auth on an LB: the LB holds no tokens, so it asks the API node
 * (POST /v2/runner/tokens/check, with its own FN_TOKEN) whether a caller's
 * Authorization header may invoke an app, and keeps each answer for
 * REFRESH_MSECS: a revoked token stops working here within a second, as on
 * the API node, and a burst of calls with one token asks once. Answers are
 * keyed by the header's digest, never kept in clear.
 */
import { digestOf, REFRESH_MSECS, type InvokeGuard, type InvokeVerdict } from '../auth/index.js';
import { ApiError, E } from '../models/index.js';
import { apiHeaders, refusedToken } from './lookup.js';

const VERDICTS: readonly InvokeVerdict[] = ['ok', 'missing', 'invalid', 'forbidden'];
/** Answers kept at most; past it the oldest go first. */
const MAX_KEPT = 10_000;

export class RemoteInvokeGuard implements InvokeGuard {
  private readonly url: string;
  private readonly kept = new Map<string, { at: number; verdict: Promise<InvokeVerdict> }>();

  constructor(
    private readonly apiUrl: string,
    private readonly token: string | undefined,
    private readonly ttlMs = REFRESH_MSECS,
    private readonly timeoutMs = 5_000,
  ) {
    this.url = `${apiUrl.replace(/\/+$/, '')}/v2/runner/tokens/check`;
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

  private async ask(authorization: string, app: string): Promise<InvokeVerdict> {
    let res: Response;
    try {
      res = await fetch(this.url, {
        method: 'POST',
        body: JSON.stringify({ authorization, app }),
        headers: apiHeaders(this.token, { 'Content-Type': 'application/json' }),
        signal: AbortSignal.timeout(this.timeoutMs),
      });
    } catch (err) {
      throw new ApiError(E.ServiceUnavailable, { message: `the API node (FN_RUNNER_API_URL=${this.apiUrl}) cannot be reached to check the caller's token`, cause: err });
    }
    if (res.status === 401 || res.status === 403) throw refusedToken(this.apiUrl, res.status);
    const json = (await res.json().catch(() => ({}))) as { verdict?: unknown };
    if (!res.ok || !VERDICTS.includes(json.verdict as InvokeVerdict)) {
      throw new ApiError(E.ServiceUnavailable, { message: `the API node (FN_RUNNER_API_URL=${this.apiUrl}) could not check the caller's token (${res.status})` });
    }
    return json.verdict as InvokeVerdict;
  }
}
