/**
 * Fn and trigger lookups for the invoke endpoints, cached: the datastore is
 * off the hot path. Every change made through the API (the change feed)
 * empties the cache (a change of secrets too: their version is part of what
 * a lookup finds). Misses are not cached: a fn created a moment later must
 * be found.
 */
import type { Datastore, SecretStore } from '../datastore/index.js';
import type { Target, TargetLookup } from '../call/index.js';
import { callFn, type App, type CallFn, type ChangeFeed, type Fn } from '../models/index.js';

export type { Target, TargetLookup } from '../call/index.js';

/** Lookups in this node's own datastore. */
export class FnLookup implements TargetLookup {
  private readonly fns = new Map<string, Promise<Target>>();
  private readonly triggers = new Map<string, Promise<Target>>();
  /** Lookups that have resolved, readable without awaiting a promise (the common case). */
  private readonly ready = new Map<string, Target>();
  private readonly unsubscribe: () => void;

  constructor(
    private readonly datastore: Datastore,
    changes: ChangeFeed,
    /** The fns' secrets: each lookup reads their version (CallFn.secretsVersion), never their values. */
    private readonly secrets?: Pick<SecretStore, 'versionFor'>,
  ) {
    this.unsubscribe = changes.subscribe(() => this.clear());
  }

  /** What a call of `fn` of `app` runs with. */
  private async target(app: App, fn: Fn): Promise<CallFn> {
    return callFn(app, fn, (await this.secrets?.versionFor(app.id, fn.id)) ?? '');
  }

  /** The fn `fnId`: a Target at once when cached, else a promise (rejects with the datastore's not-found). */
  byFn(fnId: string): Target | Promise<Target> {
    return (
      this.ready.get(fnId) ??
      this.cached(this.fns, fnId, async () => {
        const fn = await this.datastore.getFnById(fnId);
        const app = await this.datastore.getAppById(fn.app_id);
        return { fn: await this.target(app, fn) };
      })
    );
  }

  /** The fn behind the HTTP trigger `source` of app `appName`. */
  byTrigger(appName: string, source: string): Target | Promise<Target> {
    const key = `${appName}\0${source}`;
    return (
      this.ready.get(key) ??
      this.cached(this.triggers, key, async () => {
        const app = await this.datastore.getAppByName(appName);
        const trigger = await this.datastore.getTriggerBySource(app.id, 'http', source);
        const fn = await this.datastore.getFnById(trigger.fn_id);
        return { fn: await this.target(app, fn), triggerId: trigger.id };
      })
    );
  }

  clear(): void {
    this.fns.clear();
    this.triggers.clear();
    this.ready.clear();
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
          if (cache.get(key) === loading) this.ready.set(key, t);
        },
        () => {
          if (cache.get(key) === loading) cache.delete(key);
        },
      );
    }
    return hit;
  }
}
