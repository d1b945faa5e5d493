import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { newAppFromJson, newFnFromJson } from '../../models/index.js';
import { runDatastoreContract } from '../datastore.contract.js';
import { openSqlDatastore, openSqlite, sqlitePath } from './dialects.js';

const dir = mkdtempSync(join(tmpdir(), 'fnts-sqlite-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

runDatastoreContract('sqlite in memory', () => openSqlite(':memory:'));

let n = 0;
runDatastoreContract('sqlite file', () => openSqlite(join(dir, `contract-${n++}.db`)));

describe('sqlite datastore', () => {
  it('keeps every record across a close and reopen of the file', async () => {
    const path = join(dir, 'reopen.db');
    const first = await openSqlite(path);
    const app = await first.insertApp(newAppFromJson({ name: 'persisted', config: { K: 'v' } }));
    const fn = await first.insertFn(newFnFromJson({ app_id: app.id, name: 'f', image: 'img' }));
    await first.close();

    const second = await openSqlite(path);
    expect(await second.getAppById(app.id)).toEqual(app);
    expect(await second.getFnById(fn.id)).toEqual(fn);
    await second.close();
  });

  it('reads Fn-style FN_DB_URLs', () => {
    expect(sqlitePath('sqlite3:///var/lib/fn/fn.db')).toBe('/var/lib/fn/fn.db');
    expect(sqlitePath('sqlite3://data/fn.db', '/srv')).toBe('/srv/data/fn.db');
    expect(sqlitePath('sqlite3://:memory:')).toBe(':memory:');
  });

  it('creates the database folder on first use', async () => {
    const store = await openSqlDatastore(`sqlite3://${join(dir, 'nested', 'deeper', 'fn.db')}`);
    await store.insertApp(newAppFromJson({ name: 'x' }));
    await store.close();
  });

  it('names the URL forms it accepts when given another database', async () => {
    await expect(openSqlDatastore('mysql://u:p@host/db')).rejects.toThrow(/sqlite3:\/\/\/path\/to\/fn.db/);
  });
});
