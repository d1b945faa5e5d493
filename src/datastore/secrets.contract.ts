/**
 * The SecretStore contract (secrets.ts), as a suite every implementation
 * runs: `runSecretStoreContract(name, open)`, with the Datastore the
 * secrets' owners live in.
 */
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { ApiError, E, MAX_SECRET_VALUE_BYTES, MAX_SECRETS, newAppFromJson, newFnFromJson, type App, type ErrorDef, type Fn } from '../models/index.js';
import type { Datastore } from './datastore.js';
import type { SecretStore } from './secrets.js';

export interface OpenedSecretStore {
  readonly datastore: Datastore;
  readonly secrets: SecretStore;
  close(): Promise<void>;
}

async function expectError(p: Promise<unknown>, d: ErrorDef): Promise<void> {
  const err = await p.then(
    () => undefined,
    (e: unknown) => e,
  );
  expect(err, `expected ${d.code}`).toBeInstanceOf(ApiError);
  expect((err as ApiError).code).toBe(d.code);
}

const at = (second: number): string => new Date(Date.UTC(2026, 10, 23, 10, 0, second)).toISOString();
const text = (values: Map<string, Buffer>): Record<string, string> => Object.fromEntries([...values].map(([k, v]) => [k, v.toString()]));

export function runSecretStoreContract(name: string, open: () => Promise<OpenedSecretStore>): void {
  describe(`SecretStore contract: ${name}`, () => {
    let opened: OpenedSecretStore;
    let ds: Datastore;
    let secrets: SecretStore;
    let app: App;
    let fn: Fn;
    beforeEach(async () => {
      opened = await open();
      ds = opened.datastore;
      secrets = opened.secrets;
      app = await ds.insertApp(newAppFromJson({ name: 'a' }));
      fn = await ds.insertFn(newFnFromJson({ app_id: app.id, name: 'f', image: 'img' }));
    });
    afterEach(async () => {
      await opened.close();
    });
    const ofApp = (id = app.id) => ({ kind: 'app' as const, id });
    const ofFn = (id = fn.id) => ({ kind: 'fn' as const, id });

    it('lists names and times in bytewise name order, never values', async () => {
      for (const n of ['b', 'B', 'a_', 'é']) await secrets.putSecret(ofApp(), n, Buffer.from(`value of ${n}`), at(1));
      const list = await secrets.listSecrets(ofApp());
      expect(list.map((s) => s.name)).toEqual(['B', 'a_', 'b', 'é']);
      expect(list[0]).toEqual({ name: 'B', created_at: at(1), updated_at: at(1), version: expect.any(String) });
      expect(JSON.stringify(list)).not.toContain('value of');
      expect(await secrets.listSecrets(ofFn())).toEqual([]);
    });

    it('keeps created_at and changes updated_at and the version when a value is written again', async () => {
      const first = await secrets.putSecret(ofFn(), 'K', Buffer.from('one'), at(1));
      const second = await secrets.putSecret(ofFn(), 'K', Buffer.from('two'), at(2));
      expect(second).toEqual({ name: 'K', created_at: at(1), updated_at: at(2), version: expect.any(String) });
      expect(second.version).not.toBe(first.version);
      expect(await secrets.listSecrets(ofFn())).toEqual([second]);
      expect(text(await secrets.valuesFor(app.id, fn.id))).toEqual({ K: 'two' });
    });

    it("gives a fn's containers its app's secrets and its own, its own winning, and no other's", async () => {
      const other = await ds.insertFn(newFnFromJson({ app_id: app.id, name: 'g', image: 'img' }));
      const otherApp = await ds.insertApp(newAppFromJson({ name: 'b' }));
      await secrets.putSecret(ofApp(), 'SHARED', Buffer.from('from the app'), at(1));
      await secrets.putSecret(ofApp(), 'BOTH', Buffer.from('the app'), at(1));
      await secrets.putSecret(ofFn(), 'BOTH', Buffer.from('the fn'), at(1));
      await secrets.putSecret(ofFn(), 'OWN', Buffer.from('mine'), at(1));
      await secrets.putSecret(ofFn(other.id), 'OTHER', Buffer.from('not mine'), at(1));
      await secrets.putSecret(ofApp(otherApp.id), 'ELSEWHERE', Buffer.from('not mine'), at(1));
      expect(text(await secrets.valuesFor(app.id, fn.id))).toEqual({ SHARED: 'from the app', BOTH: 'the fn', OWN: 'mine' });
      expect(text(await secrets.valuesFor(app.id, other.id))).toEqual({ SHARED: 'from the app', BOTH: 'the app', OTHER: 'not mine' });
      expect(text(await secrets.valuesFor(app.id, 'no-such-fn'))).toEqual({ SHARED: 'from the app', BOTH: 'the app' });
    });

    it('keeps any bytes a value holds, empty and largest included', async () => {
      const big = Buffer.alloc(MAX_SECRET_VALUE_BYTES, 'é'.charCodeAt(0));
      await secrets.putSecret(ofFn(), 'big', big, at(1));
      await secrets.putSecret(ofFn(), 'empty', Buffer.alloc(0), at(1));
      await secrets.putSecret(ofFn(), 'nul', Buffer.from('a\0b\n'), at(1));
      const values = await secrets.valuesFor(app.id, fn.id);
      expect(values.get('big')).toEqual(big);
      expect(values.get('empty')).toEqual(Buffer.alloc(0));
      expect(values.get('nul')).toEqual(Buffer.from('a\0b\n'));
    });

    it('has a version that is empty without secrets and changes with every write and removal', async () => {
      expect(await secrets.versionFor(app.id, fn.id)).toBe('');
      await secrets.putSecret(ofApp(), 'A', Buffer.from('1'), at(1));
      const v1 = await secrets.versionFor(app.id, fn.id);
      expect(v1).toMatch(/^[0-9a-f]+$/);
      expect(await secrets.versionFor(app.id, fn.id)).toBe(v1);
      await secrets.putSecret(ofApp(), 'A', Buffer.from('1'), at(1));
      const v2 = await secrets.versionFor(app.id, fn.id);
      expect(v2).not.toBe(v1);
      await secrets.putSecret(ofFn(), 'B', Buffer.from('2'), at(1));
      const v3 = await secrets.versionFor(app.id, fn.id);
      expect(v3).not.toBe(v2);
      await secrets.removeSecret(ofFn(), 'B');
      expect(await secrets.versionFor(app.id, fn.id)).toBe(v2);
      await secrets.removeSecret(ofApp(), 'A');
      expect(await secrets.versionFor(app.id, fn.id)).toBe('');
    });

    it('answers a missing owner or secret as not found, and changes nothing', async () => {
      await expectError(secrets.putSecret(ofApp('nope'), 'K', Buffer.from('v'), at(1)), E.AppsNotFound);
      await expectError(secrets.putSecret(ofFn('nope'), 'K', Buffer.from('v'), at(1)), E.FnsNotFound);
      await expectError(secrets.listSecrets(ofApp('nope')), E.AppsNotFound);
      await expectError(secrets.listSecrets(ofFn('nope')), E.FnsNotFound);
      await expectError(secrets.removeSecret(ofApp('nope'), 'K'), E.AppsNotFound);
      await expectError(secrets.removeSecret(ofFn('nope'), 'K'), E.FnsNotFound);
      await expectError(secrets.removeSecret(ofFn(), 'K'), E.SecretNotFound);
      // An app's secret is not its fn's, nor the other way round.
      await secrets.putSecret(ofApp(), 'K', Buffer.from('v'), at(1));
      await expectError(secrets.removeSecret(ofFn(), 'K'), E.SecretNotFound);
      expect((await secrets.listSecrets(ofApp())).map((s) => s.name)).toEqual(['K']);
    });

    it(`holds at most ${MAX_SECRETS} secrets and 256 KiB of values per owner, a rewrite counting once`, async () => {
      for (let i = 0; i < MAX_SECRETS; i++) await secrets.putSecret(ofFn(), `S${String(i).padStart(3, '0')}`, Buffer.from('x'), at(1));
      await expectError(secrets.putSecret(ofFn(), 'one-more', Buffer.from('x'), at(1)), E.TooManySecrets);
      await secrets.putSecret(ofFn(), 'S000', Buffer.from('rewritten'), at(2));
      expect(await secrets.listSecrets(ofFn())).toHaveLength(MAX_SECRETS);
      // The app has room of its own.
      const full = Buffer.alloc(MAX_SECRET_VALUE_BYTES, 1);
      for (const n of ['a', 'b', 'c', 'd']) await secrets.putSecret(ofApp(), n, full, at(1));
      await expectError(secrets.putSecret(ofApp(), 'e', Buffer.from('x'), at(1)), E.TooManySecrets);
      await secrets.putSecret(ofApp(), 'd', full, at(2));
      await expectError(secrets.putSecret(ofApp(), 'd', Buffer.alloc(MAX_SECRET_VALUE_BYTES + 1), at(3)), E.TooManySecrets);
      expect((await secrets.listSecrets(ofApp())).map((s) => [s.name, s.updated_at])).toEqual([
        ['a', at(1)],
        ['b', at(1)],
        ['c', at(1)],
        ['d', at(2)],
      ]);
    });

    it("goes with its owner: an app's delete takes its fns' secrets too, a fn's delete only the fn's", async () => {
      const other = await ds.insertFn(newFnFromJson({ app_id: app.id, name: 'g', image: 'img' }));
      await secrets.putSecret(ofApp(), 'A', Buffer.from('1'), at(1));
      await secrets.putSecret(ofFn(), 'F', Buffer.from('2'), at(1));
      await secrets.putSecret(ofFn(other.id), 'G', Buffer.from('3'), at(1));
      await ds.removeFn(fn.id);
      expect(text(await secrets.valuesFor(app.id, fn.id))).toEqual({ A: '1' });
      expect(text(await secrets.valuesFor(app.id, other.id))).toEqual({ A: '1', G: '3' });
      await ds.removeApp(app.id);
      expect(text(await secrets.valuesFor(app.id, other.id))).toEqual({});
      expect(await secrets.versionFor(app.id, other.id)).toBe('');
      // A new app and fn of the same names start with none.
      const again = await ds.insertApp(newAppFromJson({ name: 'a' }));
      expect(await secrets.listSecrets(ofApp(again.id))).toEqual([]);
    });
  });
}
