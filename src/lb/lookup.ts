/**
 * The LB's lookups: apps, fns and triggers read from an API node over Fn's
 * v2 REST API (FN_RUNNER_API_URL), the same requests Fn's LB makes:
 *
 *   GET /v2/fns/{fnID}, GET /v2/apps/{appID}, GET /v2/apps?name={name},
 *   GET /v2/runner/apps/{appID}/triggerBySource/http/{source} (the source with
 *   its leading slash: .../http//hello for /hello)
 *
 * Answers are cached until the API node says they changed (its change
 * feed, long-polled by lb/changes.ts: a change reaches the LB's calls in
 * milliseconds); from an API node without that feed (an older fnts, Fn's
 * own), for a short time (FNTS_LB_CACHE_MSECS), which bounds how stale they
 * can be: a fn changed on the API node is called as changed at most that
 * long later. A 404 is cached as briefly, so a flood of calls
 * to an unknown fn does not become a flood on the API node. When the API
 * node cannot be reached, an entry up to a minute old is still used (calls
 * go on through an API node restart); past that, calls get 503.
 *
 * With `secrets` (lb/secrets.ts) each lookup of a fn also asks for its
 * secrets (GET /v2/runner/fns/{fnID}/secrets): the fn's CallFn carries
 * their version, so runners' slot keys change when they do.
 */
import { callFn, E, remoteError, ApiError, type App, type Fn, type FnFormat } from '../models/index.js';
import type { Target, TargetLookup } from '../call/index.js';

export interface RemoteLookupOptions {
  /** The API node's base URL, e.g. http://api:8080. */
  readonly apiUrl: string;
  /** How long an answer is used before it is asked again. */
  readonly ttlMs: number;
  /** How long an answer may still be used while the API node cannot be reached. */
  readonly staleMs?: number;
  /** Each request's own bound. */
  readonly timeoutMs?: number;
  /** FN_TOKEN: sent as `Authorization: Bearer` (a token with the fleet role). */
  readonly token?: string | undefined;
  /**
   * The fns' secrets (lb/secrets.ts): each lookup asks for them too, for
   * their version (CallFn.secretsVersion) and to keep their values for the
   * calls. Without: fns are looked up as having none.
   */
  readonly secrets?: { fetch(fnId: string): Promise<{ readonly version: string }> } | undefined;
}

interface Entry {
  readonly at: number;
  readonly value: Promise<Target>;
  /** Set once the value resolved: hits skip the promise. */
  ready?: Target;
}

type Json = Record<string, unknown>;

function str(v: unknown, fallback = ''): string {
  return typeof v === 'string' ? v : fallback;
}

function int(v: unknown, fallback: number): number {
  return typeof v === 'number' && Number.isFinite(v) && v > 0 ? v : fallback;
}

function strings(v: unknown): Record<string, string> {
  const out: Record<string, string> = {};
  if (v && typeof v === 'object' && !Array.isArray(v)) for (const [k, x] of Object.entries(v)) if (typeof x === 'string') out[k] = x;
  return out;
}

/** A JSON object's value as annotations (an object), else none. */
function annotations(v: unknown): App['annotations'] {
  return (v && typeof v === 'object' ? v : {}) as App['annotations'];
}

/** An app as the API node shows it (Fn's fields; fnts's own where present). */
function appOf(j: Json): App {
  return {
    id: str(j.id),
    name: str(j.name),
    config: strings(j.config),
    annotations: annotations(j.annotations),
    syslog_url: typeof j.syslog_url === 'string' && j.syslog_url !== '' ? j.syslog_url : undefined,
    shape: undefined,
    created_at: str(j.created_at),
    updated_at: str(j.updated_at),
  };
}

/** A fn as the API node shows it; Fn's API has no format (its fns are http-stream). */
function fnOf(j: Json): Fn {
  return {
    id: str(j.id),
    name: str(j.name),
    app_id: str(j.app_id),
    image: str(j.image),
    memory: int(j.memory, 128),
    timeout: int(j.timeout, 30),
    idle_timeout: int(j.idle_timeout, 30),
    format: (str(j.format) || 'http-stream') as FnFormat,
    config: strings(j.config),
    annotations: annotations(j.annotations),
    shape: undefined,
    created_at: str(j.created_at),
    updated_at: str(j.updated_at),
  };
}

/** Headers for a request to the API node: its token, when this node has one. */
export function apiHeaders(token: string | undefined, more: Record<string, string>): Record<string, string> {
  return token === undefined ? more : { ...more, Authorization: `Bearer ${token}` };
}

/** The API node refused this node's FN_TOKEN: the operator's to fix, not the caller's (503). */
export function refusedToken(base: string, status: number): ApiError {
  const why = status === 401 ? 'no FN_TOKEN, or one it does not know' : 'an FN_TOKEN without the fleet role';
  return new ApiError(E.ServiceUnavailable, {
    message: `the API node (FN_RUNNER_API_URL=${base}) refused this LB: ${why}; set FN_TOKEN to a token with the fleet role (fnts token create --role fleet)`,
  });
}

/**
 * One request to the API node with this LB's token: its status and JSON
 * (undefined when the body is not JSON). An API node that cannot be reached
 * is 503 naming FN_RUNNER_API_URL (and `what` it was asked for); one that
 * refuses this LB's token is refusedToken(). Other statuses are the
 * caller's to read.
 */
export async function askApi(
  base: string,
  token: string | undefined,
  path: string,
  o: { method?: 'GET' | 'POST'; body?: unknown; timeoutMs: number; what?: string; signal?: AbortSignal },
): Promise<{ status: number; ok: boolean; json: Json | undefined }> {
  let res: Response;
  try {
    res = await fetch(`${base}${path}`, {
      method: o.method ?? 'GET',
      ...(o.body === undefined ? {} : { body: JSON.stringify(o.body) }),
      headers: apiHeaders(token, o.body === undefined ? { Accept: 'application/json' } : { 'Content-Type': 'application/json' }),
      signal: o.signal ? AbortSignal.any([AbortSignal.timeout(o.timeoutMs), o.signal]) : AbortSignal.timeout(o.timeoutMs),
    });
  } catch (err) {
    throw new ApiError(E.ServiceUnavailable, { message: `the API node (FN_RUNNER_API_URL=${base}) cannot be reached${o.what ? ` ${o.what}` : ''}`, cause: err });
  }
  if (res.status === 401 || res.status === 403) throw refusedToken(base, res.status);
  const text = await res.text();
  let json: Json | undefined;
  try {
    const v: unknown = JSON.parse(text);
    json = v !== null && typeof v === 'object' ? (v as Json) : undefined;
  } catch {
    // not JSON: the caller decides by the status
  }
  return { status: res.status, ok: res.ok, json };
}

/** How long an answer is kept while the API node's changes reach the LB. */
export const LIVE_TTL_MS = 60_000;

export class RemoteLookup implements TargetLookup {
  private readonly base: string;
  /** How long an answer is used: FNTS_LB_CACHE_MSECS, or LIVE_TTL_MS while changes are pushed. */
  private ttlMs: number;
  private readonly entries = new Map<string, Entry>();
  private readonly staleMs: number;
  private readonly timeoutMs: number;

  constructor(private readonly o: RemoteLookupOptions) {
    this.base = o.apiUrl.replace(/\/+$/, '');
    this.ttlMs = o.ttlMs;
    this.staleMs = o.staleMs ?? 60_000;
    this.timeoutMs = o.timeoutMs ?? 5_000;
  }

  byFn(fnId: string): Target | Promise<Target> {
    return this.cached(`f\0${fnId}`, async () => {
      const fn = fnOf(await this.get(`/v2/fns/${encodeURIComponent(fnId)}`));
      const [app, version] = await Promise.all([this.get(`/v2/apps/${encodeURIComponent(fn.app_id)}`).then(appOf), this.secretsVersion(fn.id)]);
      return { fn: callFn(app, fn, version) };
    });
  }

  byTrigger(appName: string, source: string): Target | Promise<Target> {
    return this.cached(`t\0${appName}\0${source}`, async () => {
      const list = await this.get(`/v2/apps?name=${encodeURIComponent(appName)}`);
      const item = Array.isArray(list.items) ? (list.items as Json[]).find((a) => a.name === appName) : undefined;
      if (!item) throw new ApiError(E.AppsNotFound);
      const app = appOf(item);
      // Fn's form: the source, its leading slash kept, after `http/` (Fn's API looks up the rest of the path as it is).
      const path = (source.startsWith('/') ? source : `/${source}`).split('/').map(encodeURIComponent).join('/');
      const trigger = await this.get(`/v2/runner/apps/${encodeURIComponent(app.id)}/triggerBySource/http/${path}`);
      const fn = fnOf(await this.get(`/v2/fns/${encodeURIComponent(str(trigger.fn_id))}`));
      return { fn: callFn(app, fn, await this.secretsVersion(fn.id)), triggerId: str(trigger.id) };
    });
  }

  clear(): void {
    this.entries.clear();
  }

  /**
   * Whether the API node's changes reach this lookup (lb/changes.ts): then
   * every change empties the cache and answers are kept up to LIVE_TTL_MS
   * (a bound should a change ever be missed); otherwise for FNTS_LB_CACHE_MSECS.
   *
   * Nothing is dropped here: the watch going live has just emptied the
   * cache (its first answer is a reset), and when it stops (the API node
   * went away) the entries past the short time are what calls are served
   * with until the API node is back (the stale bound).
   */
  pushed(live: boolean): void {
    this.ttlMs = live ? Math.max(LIVE_TTL_MS, this.o.ttlMs) : this.o.ttlMs;
  }

  /** The version of fn `fnId`'s secrets ('' for none), its values kept for its calls meanwhile. */
  private async secretsVersion(fnId: string): Promise<string> {
    return this.o.secrets ? (await this.o.secrets.fetch(fnId)).version : '';
  }

  private cached(key: string, load: () => Promise<Target>): Target | Promise<Target> {
    const now = performance.now();
    const hit = this.entries.get(key);
    if (hit && now - hit.at < this.ttlMs) return hit.ready ?? hit.value;
    const value = load().catch((err: unknown) => {
      // The API node is away: a recent answer still serves, within the stale bound.
      if (hit?.ready && !(err instanceof ApiError && err.status < 500) && now - hit.at < this.staleMs) return hit.ready;
      throw err;
    });
    const entry: Entry = { at: now, value };
    this.entries.set(key, entry);
    value.then(
      (t) => {
        entry.ready = t;
      },
      (err: unknown) => {
        // Only "not found" is kept (for the TTL); other failures are asked again next time.
        if (!(err instanceof ApiError && err.status === 404) && this.entries.get(key) === entry) this.entries.delete(key);
      },
    );
    if (this.entries.size > 100_000) this.sweep(now);
    return value;
  }

  private sweep(now: number): void {
    for (const [k, e] of this.entries) if (now - e.at >= this.ttlMs) this.entries.delete(k);
  }

  private async get(path: string): Promise<Json> {
    const { status, ok, json = {} } = await askApi(this.base, this.o.token, path, { timeoutMs: this.timeoutMs });
    if (!ok) {
      const message = typeof json.message === 'string' ? json.message : `the API node answered ${status}`;
      throw remoteError(status >= 500 ? 503 : status, message);
    }
    return json;
  }
}
