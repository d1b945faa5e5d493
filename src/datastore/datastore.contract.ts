/**
 * The contract every Datastore implementation must pass. Run it from the
 * implementation's test file:
 *
 *     runDatastoreContract('sqlite', () => openSqlite(':memory:'));
 */
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { ApiError, E, newAppFromJson, newFnFromJson, newTriggerFromJson, type App, type ErrorDef, type Fn, type Trigger } from '../models/index.js';
import type { Datastore } from './datastore.js';
import type { SqlDatastore } from './sql/index.js';

async function expectError(p: Promise<unknown>, d: ErrorDef): Promise<void> {
  const err = await p.then(
    () => undefined,
    (e: unknown) => e,
  );
  expect(err, `expected ${d.code}`).toBeInstanceOf(ApiError);
  expect((err as ApiError).code).toBe(d.code);
}

export function runDatastoreContract(name: string, makeStore: () => Promise<Datastore>): void {
  describe(`Datastore contract: ${name}`, () => {
    let ds: Datastore;
    beforeEach(async () => {
      ds = await makeStore();
    });
    afterEach(async () => {
      await ds.close();
    });

    const app = (n: string, extra: Record<string, unknown> = {}): Promise<App> => ds.insertApp(newAppFromJson({ name: n, ...extra }));
    const fn = (appId: string, n: string): Promise<Fn> => ds.insertFn(newFnFromJson({ app_id: appId, name: n, image: 'fnproject/hello' }));
    const trigger = (a: App, f: Fn, n: string, source: string): Promise<Trigger> => ds.insertTrigger(newTriggerFromJson({ app_id: a.id, fn_id: f.id, name: n, type: 'http', source }));

    describe('apps', () => {
      it('stores an app exactly and finds it by id and by name', async () => {
        const a = await app('myapp', { config: { A: '1' }, annotations: { 'x/y': { z: [1, 2] } }, syslog_url: 'tcp://logs:514' });
        expect(await ds.getAppById(a.id)).toEqual(a);
        expect(await ds.getAppByName('myapp')).toEqual(a);
      });

      it('refuses a second app of the same name', async () => {
        await app('dup');
        await expectError(app('dup'), E.AppsAlreadyExists);
        const names = (await ds.listApps({ perPage: 100 })).items.map((a) => a.name);
        expect(names).toEqual(['dup']);
      });

      it('tells names apart by case and accents, as Fn does (Foo, foo and föo are three apps)', async () => {
        for (const n of ['Foo', 'foo', 'föo']) await app(n);
        expect((await ds.getAppByName('foo')).name).toBe('foo');
        await expectError(ds.getAppByName('FOO'), E.AppsNotFound);
        expect((await ds.listApps({ perPage: 10 })).items.map((a) => a.name)).toEqual(['Foo', 'foo', 'föo']);
      });

      it('reports a missing app as not found', async () => {
        await expectError(ds.getAppById('nope'), E.AppsNotFound);
        await expectError(ds.getAppByName('nope'), E.AppsNotFound);
        await expectError(
          ds.updateApp('nope', (a) => a),
          E.AppsNotFound,
        );
        await expectError(ds.removeApp('nope'), E.AppsNotFound);
      });

      it('lists apps in bytewise name order, page by page, with a cursor only when more follow', async () => {
        for (const n of ['b', 'a', 'C', 'é', 'a_', '0']) await app(n);
        const all = await ds.listApps({ perPage: 100 });
        expect(all.items.map((a) => a.name)).toEqual(['0', 'C', 'a', 'a_', 'b', 'é']);
        expect(all.nextCursor).toBeUndefined();

        const seen: string[] = [];
        let cursor: string | undefined;
        let pages = 0;
        do {
          const page = await ds.listApps({ perPage: 2, cursor });
          seen.push(...page.items.map((a) => a.name));
          cursor = page.nextCursor;
          pages++;
        } while (cursor);
        expect(seen).toEqual(['0', 'C', 'a', 'a_', 'b', 'é']);
        expect(pages).toBe(3);
      });

      it('filters apps by exact name', async () => {
        await app('one');
        await app('one-two');
        expect((await ds.listApps({ perPage: 10, name: 'one' })).items.map((a) => a.name)).toEqual(['one']);
        expect((await ds.listApps({ perPage: 10, name: 'on' })).items).toEqual([]);
      });

      it('rejects a cursor it did not make', async () => {
        await expectError(ds.listApps({ perPage: 10, cursor: 'not a cursor!' }), E.InvalidCursor);
        await expectError(ds.listApps({ perPage: 10, cursor: 'garbage' }), E.InvalidCursor);
        // A cursor of another listing, here of fns.
        for (const n of ['x1', 'x2']) await app(n);
        const a = await ds.getAppByName('x1');
        for (const n of ['f1', 'f2']) await fn(a.id, n);
        const fnsCursor = (await ds.listFns({ appId: a.id, perPage: 1 })).nextCursor;
        expect(fnsCursor).toBeDefined();
        await expectError(ds.listApps({ perPage: 10, cursor: fnsCursor }), E.InvalidCursor);
      });

      it('applies an update atomically and keeps the record when the update throws', async () => {
        const a = await app('upd', { config: { A: '1' } });
        const updated = await ds.updateApp(a.id, (cur) => ({ ...cur, config: { B: '2' }, updated_at: '2030-01-01T00:00:00.000Z' }));
        expect(updated.config).toEqual({ B: '2' });
        expect(await ds.getAppById(a.id)).toEqual(updated);

        await expect(
          ds.updateApp(a.id, () => {
            throw new ApiError(E.AppsNameImmutable);
          }),
        ).rejects.toThrow('Could not update - name is immutable');
        expect(await ds.getAppById(a.id)).toEqual(updated);
      });

      it('removes an app with all its fns and triggers', async () => {
        const a = await app('gone');
        const keep = await app('kept');
        const f = await fn(a.id, 'f');
        const kf = await fn(keep.id, 'f');
        const t = await trigger(a, f, 't', '/t');
        const kt = await trigger(keep, kf, 't', '/t');
        await ds.removeApp(a.id);
        await expectError(ds.getAppById(a.id), E.AppsNotFound);
        await expectError(ds.getFnById(f.id), E.FnsNotFound);
        await expectError(ds.getTriggerById(t.id), E.TriggerNotFound);
        expect(await ds.getFnById(kf.id)).toEqual(kf);
        expect(await ds.getTriggerById(kt.id)).toEqual(kt);
      });

      it('lets exactly one of many concurrent creates of a name win', async () => {
        const results = await Promise.allSettled(Array.from({ length: 20 }, () => app('race')));
        expect(results.filter((r) => r.status === 'fulfilled')).toHaveLength(1);
        for (const r of results) {
          if (r.status === 'rejected') expect((r.reason as ApiError).code).toBe(E.AppsAlreadyExists.code);
        }
      });
    });

    describe('fns', () => {
      it("stores a fn with its app's shape", async () => {
        const a = await app('shaped', { shape: 'GENERIC_ARM' });
        const f = await fn(a.id, 'f');
        expect(f.shape).toBe('GENERIC_ARM');
        expect(await ds.getFnById(f.id)).toEqual(f);
      });

      it('keeps "no shape" for an app without one, and for its fns', async () => {
        const a = await app('unshaped');
        expect(a.shape).toBeUndefined();
        expect(await ds.getAppById(a.id)).toEqual(a);
        const f = await fn(a.id, 'f');
        expect(f.shape).toBeUndefined();
        expect(await ds.getFnById(f.id)).toEqual(f);
      });

      it('needs an existing app and a name unique within it', async () => {
        await expectError(fn('no-such-app', 'f'), E.AppsNotFound);
        const a = await app('a');
        const b = await app('b');
        await fn(a.id, 'same');
        await expectError(fn(a.id, 'same'), E.FnsExists);
        await fn(b.id, 'same');
        expect((await ds.listFns({ appId: a.id, perPage: 10 })).items).toHaveLength(1);
      });

      it("lists only the app's fns, by name, with paging and a name filter", async () => {
        const a = await app('lister');
        const other = await app('other');
        for (const n of ['f3', 'f1', 'f2']) await fn(a.id, n);
        await fn(other.id, 'f0');
        const page1 = await ds.listFns({ appId: a.id, perPage: 2 });
        expect(page1.items.map((f) => f.name)).toEqual(['f1', 'f2']);
        expect(page1.nextCursor).toBeDefined();
        const page2 = await ds.listFns({ appId: a.id, perPage: 2, cursor: page1.nextCursor });
        expect(page2.items.map((f) => f.name)).toEqual(['f3']);
        expect(page2.nextCursor).toBeUndefined();
        expect((await ds.listFns({ appId: a.id, perPage: 10, name: 'f2' })).items.map((f) => f.name)).toEqual(['f2']);
        expect((await ds.listFns({ appId: 'nope', perPage: 10 })).items).toEqual([]);
      });

      it('updates and removes a fn, removing its triggers', async () => {
        const a = await app('fa');
        const f = await fn(a.id, 'f');
        const t = await trigger(a, f, 't', '/x');
        const updated = await ds.updateFn(f.id, (cur) => ({ ...cur, image: 'fnproject/other:2', memory: 256 }));
        expect(await ds.getFnById(f.id)).toEqual(updated);
        await ds.removeFn(f.id);
        await expectError(ds.getFnById(f.id), E.FnsNotFound);
        await expectError(ds.getTriggerById(t.id), E.TriggerNotFound);
        await expectError(ds.removeFn(f.id), E.FnsNotFound);
        expect(await ds.getAppById(a.id)).toEqual(a);
      });
    });

    describe('triggers', () => {
      it('needs an existing app, an existing fn of that app and a free source', async () => {
        const a = await app('ta');
        const b = await app('tb');
        const fa = await fn(a.id, 'f');
        const fb = await fn(b.id, 'f');
        await expectError(trigger({ ...a, id: 'nope' }, fa, 't', '/a'), E.AppsNotFound);
        await expectError(trigger(a, { ...fa, id: 'nope' }, 't', '/a'), E.FnsNotFound);
        await expectError(trigger(a, fb, 't', '/a'), E.TriggerFnIDNotSameApp);
        const t = await trigger(a, fa, 't', '/a');
        expect(await ds.getTriggerById(t.id)).toEqual(t);
        expect(await ds.getTriggerBySource(a.id, 'http', '/a')).toEqual(t);
        await expectError(ds.getTriggerBySource(a.id, 'http', '/b'), E.TriggerNotFound);
        await expectError(trigger(a, fa, 'other', '/a'), E.TriggerSourceExists);
        await expectError(trigger(a, fa, 't', '/b'), E.TriggerExists);
        // The same source on another app is fine.
        await trigger(b, fb, 't', '/a');
      });

      it('pages through triggers whose names repeat across fns without losing any', async () => {
        const a = await app('pages');
        const fns = [await fn(a.id, 'f1'), await fn(a.id, 'f2'), await fn(a.id, 'f3')];
        const made: string[] = [];
        for (const [i, f] of fns.entries()) {
          made.push((await trigger(a, f, 'same', `/s${i}`)).id);
          made.push((await trigger(a, f, `t${i}`, `/t${i}`)).id);
        }
        const seen: string[] = [];
        let cursor: string | undefined;
        do {
          const page = await ds.listTriggers({ appId: a.id, perPage: 2, cursor });
          seen.push(...page.items.map((t) => t.id));
          cursor = page.nextCursor;
        } while (cursor);
        expect(seen.sort()).toEqual(made.sort());
        const byFn = await ds.listTriggers({ appId: a.id, fnId: fns[1]!.id, perPage: 10 });
        expect(byFn.items.map((t) => t.name)).toEqual(['same', 't1']);
        const byName = await ds.listTriggers({ appId: a.id, name: 'same', perPage: 10 });
        expect(byName.items).toHaveLength(3);
      });

      it('checks an updated trigger like a new one', async () => {
        const a = await app('tu');
        const f1 = await fn(a.id, 'f1');
        const f2 = await fn(a.id, 'f2');
        const t1 = await trigger(a, f1, 't1', '/one');
        await trigger(a, f1, 't2', '/two');
        await expectError(
          ds.updateTrigger(t1.id, (cur) => ({ ...cur, source: '/two' })),
          E.TriggerSourceExists,
        );
        await expectError(
          ds.updateTrigger(t1.id, (cur) => ({ ...cur, name: 't2' })),
          E.TriggerExists,
        );
        await expectError(
          ds.updateTrigger(t1.id, (cur) => ({ ...cur, fn_id: 'nope' })),
          E.FnsNotFound,
        );
        const moved = await ds.updateTrigger(t1.id, (cur) => ({ ...cur, fn_id: f2.id, name: 't2', source: '/moved' }));
        expect(await ds.getTriggerById(t1.id)).toEqual(moved);
        await ds.removeTrigger(t1.id);
        await expectError(ds.removeTrigger(t1.id), E.TriggerNotFound);
      });
    });

    it("keeps each fn's keep-alive histogram (SQL stores): replaced when written again, skipped for a fn that is gone, removed with its fn", async () => {
      const store = (ds as Partial<Pick<SqlDatastore, 'keepAlive'>>).keepAlive;
      if (!store) return;
      const a = await app('ka');
      const [f1, f2] = [await fn(a.id, 'f1'), await fn(a.id, 'f2')];
      await store.saveHistograms([
        { fnId: f1.id, data: '{"v":1}' },
        { fnId: f2.id, data: '{"v":2}' },
        { fnId: 'no-such-fn', data: '{}' },
      ]);
      await store.saveHistograms([{ fnId: f1.id, data: '{"v":3}' }]);
      const byFn = async (): Promise<Record<string, string>> => Object.fromEntries((await store.loadHistograms()).map((r) => [r.fnId, r.data]));
      expect(await byFn()).toEqual({ [f1.id]: '{"v":3}', [f2.id]: '{"v":2}' });
      await ds.removeFn(f2.id);
      expect(await byFn()).toEqual({ [f1.id]: '{"v":3}' });
    });

    it('rejects every call after close, and close is idempotent', async () => {
      await ds.close();
      await ds.close();
      await expect(ds.getAppById('x')).rejects.toThrow(/closed/);
      await expect(ds.listApps({ perPage: 1 })).rejects.toThrow(/closed/);
    });
  });
}
