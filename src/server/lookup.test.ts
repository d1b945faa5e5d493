import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { openSqlDatastore, type SqlDatastore } from '../datastore/index.js';
import { Changes, newAppFromJson, newFnFromJson, newTriggerFromJson } from '../models/index.js';
import { FnLookup, type Target } from './lookup.js';

describe('FnLookup (SQLite)', () => {
  let dir: string;
  let ds: SqlDatastore;
  let changes: Changes;
  let lookup: FnLookup;
  beforeEach(async () => {
    dir = mkdtempSync(join(tmpdir(), 'fnts-lookup-'));
    ds = await openSqlDatastore(`sqlite3://${join(dir, 'fn.db')}`);
    changes = new Changes();
    lookup = new FnLookup(ds, changes);
  });
  afterEach(async () => {
    lookup.close();
    await ds.close();
    rmSync(dir, { recursive: true, force: true });
  });

  const resolve = async (t: Target | Promise<Target>): Promise<Target> => t;

  it('answers from its cache without a promise once loaded, until a change empties it', async () => {
    const app = await ds.insertApp(newAppFromJson({ name: 'shop', config: { A: '1' } }));
    const fn = await ds.insertFn(newFnFromJson({ app_id: app.id, name: 'cart', image: 'cart:1', config: { B: '2' } }));
    const first = await resolve(lookup.byFn(fn.id));
    expect(first.fn).toMatchObject({ fnId: fn.id, appName: 'shop', image: 'cart:1', config: { A: '1', B: '2' } });
    // The hot path: a cached target comes back as is, not wrapped in a promise.
    expect(lookup.byFn(fn.id)).toBe(first);

    await ds.updateFn(fn.id, (f) => ({ ...f, image: 'cart:2' }));
    expect((await resolve(lookup.byFn(fn.id))).fn.image).toBe('cart:1');
    changes.publish({ kind: 'fn', id: fn.id, appId: app.id });
    expect((await resolve(lookup.byFn(fn.id))).fn.image).toBe('cart:2');
  });

  it('finds the fn behind an HTTP trigger, with the trigger id for the call', async () => {
    const app = await ds.insertApp(newAppFromJson({ name: 'web' }));
    const fn = await ds.insertFn(newFnFromJson({ app_id: app.id, name: 'page', image: 'page:1' }));
    const trigger = await ds.insertTrigger(newTriggerFromJson({ app_id: app.id, fn_id: fn.id, name: 'home', type: 'http', source: '/home' }));
    const t = await resolve(lookup.byTrigger('web', '/home'));
    expect(t).toMatchObject({ triggerId: trigger.id, fn: { fnId: fn.id, appName: 'web' } });
  });

  it('does not remember a miss: a fn created a moment later is found', async () => {
    const app = await ds.insertApp(newAppFromJson({ name: 'late' }));
    const fn = newFnFromJson({ app_id: app.id, name: 'soon', image: 'soon:1' });
    await expect(resolve(lookup.byFn(fn.id))).rejects.toMatchObject({ status: 404 });
    await ds.insertFn(fn);
    expect((await resolve(lookup.byFn(fn.id))).fn.fnName).toBe('soon');
  });
});
