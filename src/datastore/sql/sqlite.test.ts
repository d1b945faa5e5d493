import { randomBytes } from 'node:crypto';
import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { newAppFromJson, newFnFromJson } from '../../models/index.js';
import { runCallStoreContract } from '../calls.contract.js';
import { runDatastoreContract } from '../datastore.contract.js';
import { SecretBox, UnsealError } from '../secret-box.js';
import { runSecretStoreContract } from '../secrets.contract.js';
import { SqlSecretStore } from './secrets.js';
import type { SqlDatastore } from './store.js';
import { openSqlDatastore, openSqlite, sqlitePath } from './dialects.js';
import { migrations } from './migrations.js';
import BetterSqlite3 from 'better-sqlite3';
import { Kysely, Migrator, SqliteDialect } from 'kysely';
import { SqlQueue } from '../../mq/sql.js';
import { DatabaseBusyError } from '../storage.js';

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

  it('upgrades a database made before fns had a format, keeping every fn', async () => {
    const path = join(dir, 'old-schema.db');
    const old = new Kysely<any>({ dialect: new SqliteDialect({ database: new BetterSqlite3(path) }) });
    const migrator = new Migrator({
      db: old,
      provider: { getMigrations: async () => ({ '0001_initial': migrations['0001_initial']! }) },
      migrationTableName: 'fnts_migrations',
      migrationLockTableName: 'fnts_migrations_lock',
    });
    expect((await migrator.migrateToLatest()).error).toBeUndefined();
    const now = new Date().toISOString();
    await old.insertInto('apps').values({ id: 'A', name: 'a', config: '{}', annotations: '{}', syslog_url: null, shape: 'GENERIC_X86', created_at: now, updated_at: now }).execute();
    await old
      .insertInto('fns')
      .values({ id: 'F', name: 'f', app_id: 'A', image: 'i:1', memory: 128, timeout: 30, idle_timeout: 30, config: '{}', annotations: '{}', shape: 'GENERIC_X86', created_at: now, updated_at: now })
      .execute();
    await old.destroy();

    const store = await openSqlite(path);
    expect(await store.getFnById('F')).toMatchObject({ id: 'F', name: 'f', format: 'http-stream' });
    await store.close();
  });

  it('upgrades a database whose call logs had a table of their own, keeping every log', async () => {
    const path = join(dir, 'call-logs-table.db');
    const old = new Kysely<any>({ dialect: new SqliteDialect({ database: new BetterSqlite3(path) }) });
    const upTo0004 = Object.fromEntries(Object.entries(migrations).filter(([name]) => name <= '0004'));
    const migrator = new Migrator({ db: old, provider: { getMigrations: async () => upTo0004 }, migrationTableName: 'fnts_migrations', migrationLockTableName: 'fnts_migrations_lock' });
    expect((await migrator.migrateToLatest()).error).toBeUndefined();
    const record = { id: 'C1', status: 'success', app_id: 'A', fn_id: 'F', created_at: '2026-11-23T10:00:00.000Z', stats: [] };
    await old
      .insertInto('calls')
      .values({ id: 'C1', fn_id: 'F', app_id: 'A', status: 'success', created_at: record.created_at, record: JSON.stringify(record) })
      .execute();
    await old.insertInto('call_logs').values({ call_id: 'C1', fn_id: 'F', log: 'kept\n' }).execute();
    await old.destroy();

    const store = await openSqlite(path);
    expect(await store.calls.getCall('F', 'C1')).toEqual(record);
    expect(await store.calls.getLog('F', 'C1')).toBe('kept\n');
    await store.close();
  });

  it('upgrades a queue whose bodies were on its items, keeping every queued call, body and dead letter', async () => {
    const path = join(dir, 'mq-bodies-inline.db');
    const old = new Kysely<any>({ dialect: new SqliteDialect({ database: new BetterSqlite3(path) }) });
    const upTo0005 = Object.fromEntries(Object.entries(migrations).filter(([name]) => name <= '0005'));
    const migrator = new Migrator({ db: old, provider: { getMigrations: async () => upTo0005 }, migrationTableName: 'fnts_migrations', migrationLockTableName: 'fnts_migrations_lock' });
    expect((await migrator.migrateToLatest()).error).toBeUndefined();
    const binary = Buffer.from(Array.from({ length: 300_000 }, (_, i) => i % 251));
    const row = (id: string, body: Buffer, state: string) => ({
      id,
      fn_id: 'F',
      call_json: `{"id":"${id}"}`,
      body,
      attempts: 0,
      max_attempts: 3,
      state,
      enqueued_at: 1,
      available_at: 1,
      lease_until: 0,
      leased_by: null,
      reason: null,
    });
    await old
      .insertInto('mq')
      .values([row('big', binary, 'ready'), row('empty', Buffer.alloc(0), 'ready'), row('gone', Buffer.from('x'), 'dead')])
      .execute();
    await old.destroy();

    const store = await openSqlite(path);
    try {
      const queue = new SqlQueue(() => store.database());
      const first = await queue.reserve(1000, 'w');
      const second = await queue.reserve(1000, 'w');
      const byId = new Map([first, second].map((c) => [c!.id, c!]));
      expect(byId.get('big')!.body.equals(binary)).toBe(true);
      expect(byId.get('empty')!.body.length).toBe(0);
      expect(await queue.has(['gone'])).toEqual(new Set(['gone']));
      // Dead before the upgrade: counted dead from it, so kept for a retention from now.
      expect(await queue.pruneDead(Date.now() - 60_000)).toBe(0);
    } finally {
      await store.close();
    }
  });

  it('answers 503 "busy, try again" (not a 500) when another writer holds the file past the busy timeout, and changes nothing', async () => {
    const path = join(dir, 'busy.db');
    const store = await openSqlite(path, 50);
    const other = new BetterSqlite3(path);
    try {
      other.exec('begin immediate');
      const refused = await store.insertApp(newAppFromJson({ name: 'blocked' })).then(
        () => undefined,
        (err: unknown) => err,
      );
      expect(refused).toBeInstanceOf(DatabaseBusyError);
      expect(refused).toMatchObject({ status: 503, headers: { 'Retry-After': '1' } });
      other.exec('rollback');
      expect((await store.listApps({ perPage: 10 })).items).toEqual([]);
      expect((await store.insertApp(newAppFromJson({ name: 'blocked' }))).name).toBe('blocked');
    } finally {
      other.close();
      await store.close();
    }
  });

  it('waits for another writer without stopping the event loop, and writes once the lock is free', async () => {
    const path = join(dir, 'patient.db');
    const store = await openSqlite(path);
    const other = new BetterSqlite3(path);
    let ticks = 0;
    const ticker = setInterval(() => ticks++, 5);
    try {
      other.exec('begin immediate');
      setTimeout(() => other.exec('rollback'), 300);
      const t0 = performance.now();
      const app = await store.insertApp(newAppFromJson({ name: 'waited' }));
      const waited = performance.now() - t0;
      expect(waited).toBeGreaterThanOrEqual(250);
      // A loop that slept in SQLite's busy handler would have ticked once or twice in those 300 ms.
      expect(ticks).toBeGreaterThan(waited / 5 / 3);
      expect((await store.getAppById(app.id)).name).toBe('waited');
      // A transaction (an app's update) waits the same way, at its BEGIN.
      other.exec('begin immediate');
      setTimeout(() => other.exec('rollback'), 100);
      expect((await store.updateApp(app.id, (current) => ({ ...current, config: { K: 'v' } }))).config).toEqual({ K: 'v' });
    } finally {
      clearInterval(ticker);
      other.close();
      await store.close();
    }
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

  it('names the URL forms it accepts when given a database it does not know, without the password', async () => {
    const refused = openSqlDatastore('oracle://u:hunter2@host/db');
    await expect(refused).rejects.toThrow(/sqlite3:\/\/\/path\/to\/fn.db, postgres:\/\/.*mysql:\/\//);
    await expect(refused).rejects.not.toThrow(/hunter2/);
  });
});

runCallStoreContract('sqlite in memory', () => openSqlite(':memory:'));
runCallStoreContract('sqlite file', () => openSqlite(join(dir, `calls-${n++}.db`)));

const withSecrets = (store: SqlDatastore, key = randomBytes(32)) => ({
  datastore: store,
  secrets: new SqlSecretStore(() => store.database(), new SecretBox(key), store.disk),
  close: () => store.close(),
});
runSecretStoreContract('sqlite in memory', async () => withSecrets(await openSqlite(':memory:')));
runSecretStoreContract('sqlite file', async () => withSecrets(await openSqlite(join(dir, `secrets-${n++}.db`))));

describe('sqlite secrets', () => {
  it('never writes a value in clear to the database file or its write-ahead log', async () => {
    const path = join(dir, `clear-${n++}.db`);
    const store = await openSqlite(path);
    const { secrets } = withSecrets(store);
    const value = `s3cr3t-${randomBytes(12).toString('hex')}`;
    const app = await store.insertApp(newAppFromJson({ name: 'a' }));
    const fn = await store.insertFn(newFnFromJson({ app_id: app.id, name: 'f', image: 'img' }));
    await secrets.putSecret({ kind: 'app', id: app.id }, 'APP_PASSWORD', Buffer.from(value), new Date().toISOString());
    await secrets.putSecret({ kind: 'fn', id: fn.id }, 'FN_PASSWORD', Buffer.from(value), new Date().toISOString());
    expect((await secrets.valuesFor(app.id, fn.id)).get('FN_PASSWORD')!.toString()).toBe(value);
    const files = [path, `${path}-wal`].filter((f) => existsSync(f));
    expect(files).toContain(`${path}-wal`);
    for (const f of files) expect(readFileSync(f).includes(value), f).toBe(false);
    // A name is not secret: the same bytes do show the rows are there.
    expect(files.some((f) => readFileSync(f).includes('FN_PASSWORD'))).toBe(true);
    await store.close();
    expect(readFileSync(path).includes(value)).toBe(false);
  });

  it('does not open a value moved to another row, nor one sealed under another key, and says which secret', async () => {
    const store = await openSqlite(':memory:');
    const key = randomBytes(32);
    const { secrets } = withSecrets(store, key);
    const app = await store.insertApp(newAppFromJson({ name: 'a' }));
    const fn = await store.insertFn(newFnFromJson({ app_id: app.id, name: 'f', image: 'img' }));
    await secrets.putSecret({ kind: 'app', id: app.id }, 'A', Buffer.from('app value'), new Date().toISOString());
    await secrets.putSecret({ kind: 'fn', id: fn.id }, 'B', Buffer.from('fn value'), new Date().toISOString());
    expect(await new SqlSecretStore(() => store.database(), new SecretBox(key), store.disk).sealedElsewhere()).toEqual([]);
    const other = new SqlSecretStore(() => store.database(), new SecretBox(randomBytes(32)), store.disk);
    await expect(other.valuesFor(app.id, fn.id)).rejects.toThrow(UnsealError);
    expect(await other.sealedElsewhere()).toEqual([{ keyId: new SecretBox(key).keyId, count: 2 }]);
    // The fn's sealed value copied over the app's row: refused, naming the row.
    const db = store.database();
    const fnRow = await db.selectFrom('secrets').select('value').where('name', '=', 'B').executeTakeFirstOrThrow();
    await db.updateTable('secrets').set({ value: fnRow.value }).where('name', '=', 'A').execute();
    await expect(secrets.valuesFor(app.id, fn.id)).rejects.toThrow(`the secret "A" of app ${app.id} cannot be decrypted`);
    await store.close();
  });
});
