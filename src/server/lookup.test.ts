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

  it('reads an answer again in the background once it is a minute old, serving the old one meanwhile, and drops it when the fn is gone', async () => {
    let t = 0;
    const aged = new FnLookup(ds, new Changes(), undefined, () => t);
    const app = await ds.insertApp(newAppFromJson({ name: 'missed' }));
    const fn = await ds.insertFn(newFnFromJson({ app_id: app.id, name: 'f', image: 'f:1' }));
    const first = await resolve(aged.byFn(fn.id));
    // A change this node never heard of (no publish).
    await ds.updateFn(fn.id, (f) => ({ ...f, image: 'f:2' }));
    t = 59_000;
    expect(aged.byFn(fn.id)).toBe(first);
    t = 61_000;
    // Old: served at once as it was, and read again meanwhile.
    expect(aged.byFn(fn.id)).toBe(first);
    await new Promise((r) => setTimeout(r, 50));
    const again = aged.byFn(fn.id);
    expect(again).not.toBeInstanceOf(Promise);
    expect((again as Target).fn.image).toBe('f:2');
    // Gone without a word: dropped at the next read past its age, then not found.
    await ds.removeFn(fn.id);
    t = 130_000;
    expect(aged.byFn(fn.id)).not.toBeInstanceOf(Promise);
    await new Promise((r) => setTimeout(r, 50));
    await expect(resolve(aged.byFn(fn.id))).rejects.toMatchObject({ status: 404 });
    aged.close();
  });
});
