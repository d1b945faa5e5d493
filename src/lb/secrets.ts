/**
 * Fns' secrets on an LB: a runner keeps no database, so the LB asks the API
 * node for the values of a fn's secrets (GET /v2/runner/fns/{fnID}/secrets,
 * with its FN_TOKEN: the fleet right) and sends them to the runner with the
 * call (runner-protocol.ts: SECRETS_FIELD). The answer's version is the
 * fn's CallFn.secretsVersion (the lookup reads it from here too), so
 * runners' slot keys change when the secrets do.
 *
 * Values are kept in memory, per fn and version, no longer than the fn
 * lookups' cache (FNTS_LB_CACHE_MSECS): a secret deleted or changed on the
 * API node is gone from here as soon as the fn's lookup is. They are never
 * logged, never put in an error, a record or the queue.
 */
import { ApiError, E, remoteError } from '../models/index.js';
import { askApi } from './lookup.js';

/** A fn's secrets as the API node gave them: their version (CallFn.secretsVersion, '' for none) and values by name. */
export interface FnSecrets {
  readonly version: string;
  readonly values: Readonly<Record<string, string>>;
}

export interface RemoteSecretsOptions {
  /** The API node's base URL (FN_RUNNER_API_URL). */
  readonly apiUrl: string;
  /** How long values are kept (FNTS_LB_CACHE_MSECS). */
  readonly ttlMs: number;
  /** FN_TOKEN. */
  readonly token?: string | undefined;
  readonly timeoutMs?: number;
}

const NONE: FnSecrets = Object.freeze({ version: '', values: Object.freeze({}) });
/** Versions kept at most; past it the oldest go first. */
const MAX_KEPT = 10_000;

export class RemoteSecrets {
  private readonly base: string;
  private readonly kept = new Map<string, { readonly at: number; readonly values: Readonly<Record<string, string>> }>();
  private readonly asking = new Map<string, Promise<FnSecrets>>();

  constructor(private readonly o: RemoteSecretsOptions) {
    this.base = o.apiUrl.replace(/\/+$/, '');
  }

  /**
   * Asks the API node for fn `fnId`'s secrets now (one question at a time
   * per fn), and keeps their values under their version. An API node
   * without the endpoint (404: Fn's) has no secrets to give.
   */
  fetch(fnId: string): Promise<FnSecrets> {
    const pending = this.asking.get(fnId);
    if (pending) return pending;
    const asked = this.ask(fnId).finally(() => this.asking.delete(fnId));
    this.asking.set(fnId, asked);
    return asked;
  }

  /**
   * The secrets a call of fn `fnId` looked up with version `version` is to
   * carry: the kept values of that version, else what the API node has now
   * (another version when they changed since: a detached call that waited
   * in the queue gets the values of now, and its version with them).
   */
  async current(fnId: string, version: string): Promise<FnSecrets> {
    const hit = this.kept.get(`${fnId}\0${version}`);
    if (hit && performance.now() - hit.at < this.o.ttlMs) return { version, values: hit.values };
    return this.fetch(fnId);
  }

  clear(): void {
    this.kept.clear();
  }

  private async ask(fnId: string): Promise<FnSecrets> {
    const { status, ok, json } = await askApi(this.base, this.o.token, `/v2/runner/fns/${encodeURIComponent(fnId)}/secrets`, {
      timeoutMs: this.o.timeoutMs ?? 5_000,
      what: `for the secrets of fn ${fnId}`,
    });
    // Not there (an API node without the endpoint, or the fn went meanwhile): no secrets to send.
    if (status === 404) return NONE;
    if (!ok) {
      const said = json?.['message'];
      const message = typeof said === 'string' ? said : `the API node answered ${status} for the secrets of fn ${fnId}`;
      throw remoteError(status >= 500 ? 503 : status, message);
    }
    const version = json?.['version'];
    const secrets = json?.['secrets'];
    if (
      typeof version !== 'string' ||
      !/^[0-9a-f]{0,64}$/.test(version) ||
      !secrets ||
      typeof secrets !== 'object' ||
      Array.isArray(secrets) ||
      Object.values(secrets).some((v) => typeof v !== 'string')
    ) {
      throw new ApiError(E.ServiceUnavailable, { message: `the API node (FN_RUNNER_API_URL=${this.base}) answered the secrets of fn ${fnId} in a form this LB does not know` });
    }
    const values = Object.freeze({ ...(secrets as Record<string, string>) });
    if (version !== '') {
      const now = performance.now();
      this.kept.delete(`${fnId}\0${version}`);
      this.kept.set(`${fnId}\0${version}`, { at: now, values });
      this.sweep(now);
    }
    return { version, values };
  }

  private sweep(now: number): void {
    for (const [k, e] of this.kept) {
      if (this.kept.size <= MAX_KEPT && now - e.at < this.o.ttlMs) break;
      this.kept.delete(k);
    }
  }
}
