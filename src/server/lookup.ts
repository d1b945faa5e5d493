/**
 * Fn and trigger lookups for the invoke endpoints, cached: the datastore is
 * off the hot path. Every change made through the API (the change feed,
 * this node's and, through the database, every other node's) empties the
 * cache (a change of secrets too: their version is part of what a lookup
 * finds). Misses are not cached: a fn created a moment later must be found.
 * An answer older than MAX_AGE_MS is read again in the background while it
 * still serves: should a change ever be missed (a notification lost with
 * its connection), a node is wrong for a minute at most, never for good.
 */
import type { Datastore, SecretStore } from '../datastore/index.js';
import type { Target, TargetLookup } from '../call/index.js';
import { callFn, type App, type CallFn, type ChangeFeed, type Fn } from '../models/index.js';

export type { Target, TargetLookup } from '../call/index.js';

/** How long a cached answer serves before it is read again (in the background). */
export const MAX_AGE_MS = 60_000;

/** Lookups in this node's own datastore. */
export class FnLookup implements TargetLookup {
  private readonly fns = new Map<string, Promise<Target>>();
  private readonly triggers = new Map<string, Promise<Target>>();
  /** Lookups that have resolved, readable without awaiting a promise (the common case), and when they were read. */
  private readonly ready = new Map<string, { readonly target: Target; readonly at: number }>();
  /** Keys being read again in the background. */
  private readonly refreshing = new Set<string>();
  /** Counts clear()s: a background read started before one is not kept. */
  private generation = 0;
  private readonly unsubscribe: () => void;

  constructor(
    private readonly datastore: Datastore,
    changes: ChangeFeed,
    /** The fns' secrets: each lookup reads their version (CallFn.secretsVersion), never their values. */
    private readonly secrets?: Pick<SecretStore, 'versionFor'>,
    private readonly now: () => number = () => performance.now(),
    private readonly maxAgeMs: number = MAX_AGE_MS,
  ) {
    this.unsubscribe = changes.subscribe(() => this.clear());
  }

  /** What a call of `fn` of `app` runs with. */
  private async target(app: App, fn: Fn): Promise<CallFn> {
    return callFn(app, fn, (await this.secrets?.versionFor(app.id, fn.id)) ?? '');
  }

  /** The fn `fnId`: a Target at once when cached, else a promise (rejects with the datastore's not-found). */
  byFn(fnId: string): Target | Promise<Target> {
    return this.lookup(this.fns, fnId, async () => {
      const fn = await this.datastore.getFnById(fnId);
      const app = await this.datastore.getAppById(fn.app_id);
      return { fn: await this.target(app, fn) };
    });
  }

  /** The fn behind the HTTP trigger `source` of app `appName`. */
  byTrigger(appName: string, source: string): Target | Promise<Target> {
    const key = `${appName}\0${source}`;
    return this.lookup(this.triggers, key, async () => {
      const app = await this.datastore.getAppByName(appName);
      const trigger = await this.datastore.getTriggerBySource(app.id, 'http', source);
      const fn = await this.datastore.getFnById(trigger.fn_id);
      return { fn: await this.target(app, fn), triggerId: trigger.id };
    });
  }

  clear(): void {
    this.generation++;
    this.fns.clear();
    this.triggers.clear();
    this.ready.clear();
    this.refreshing.clear();
  }

  /** The cached answer at once (read again in the background once old), else a promise of it. */
  private lookup(cache: Map<string, Promise<Target>>, key: string, load: () => Promise<Target>): Target | Promise<Target> {
    const hit = this.ready.get(key);
    if (hit === undefined) return this.cached(cache, key, load);
    if (this.now() - hit.at > this.maxAgeMs && !this.refreshing.has(key)) this.refresh(cache, key, load);
    return hit.target;
  }

  /** Reads `key` again; keeps the new answer, or drops the old one when it is gone (404). Other failures keep it. */
  private refresh(cache: Map<string, Promise<Target>>, key: string, load: () => Promise<Target>): void {
    const generation = this.generation;
    this.refreshing.add(key);
    load().then(
      (target) => {
        if (generation !== this.generation) return;
        this.refreshing.delete(key);
        this.ready.set(key, { target, at: this.now() });
        cache.set(key, Promise.resolve(target));
      },
      (err: unknown) => {
        if (generation !== this.generation) return;
        this.refreshing.delete(key);
        if ((err as { status?: unknown } | null)?.status === 404) {
          this.ready.delete(key);
          cache.delete(key);
        }
      },
    );
  }

  close(): void {
    this.unsubscribe();
    this.clear();
  }

  private cached(cache: Map<string, Promise<Target>>, key: string, load: () => Promise<Target>): Promise<Target> {
    let hit = cache.get(key);
    if (!hit) {
      const loading = load();
      hit = loading;
      cache.set(key, loading);
      loading.then(
        (t) => {
          if (cache.get(key) === loading) this.ready.set(key, { target: t, at: this.now() });
        },
        () => {
          if (cache.get(key) === loading) cache.delete(key);
        },
      );
    }
    return hit;
  }
}
