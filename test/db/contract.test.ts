/**
 * The datastore's contracts (apps, fns, triggers, call records and logs,
 * secrets, the detached-call queue) on every database fnts runs on: a
 * SQLite file, Postgres and MariaDB, each a real server started for this
 * file (test/support/databases.ts). Each contract runs twice per database:
 * on a fresh database, and on one first made with the first schema only
 * and migrated up by the store. Then what several nodes on one database
 * need: all of them start at once on an empty database, a newer schema is
 * refused, and a database that stops answering answers 503 within 2 s and
 * serves again by itself.
 */
import { spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { mkdirSync } from 'node:fs';
import { dirname } from 'node:path';
import { fileURLToPath } from 'node:url';
import { Kysely, Migrator, sql } from 'kysely';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { parseDbUrl } from '../../src/config/index.js';
import { runCallStoreContract } from '../../src/datastore/calls.contract.js';
import { runDatastoreContract } from '../../src/datastore/datastore.contract.js';
import {
  DatabaseUnavailableError,
  openSqlDatastore,
  SCHEMA_VERSION,
  SchemaTooNewError,
  SecretBox,
  SqlSecretStore,
  type SqlDatastore,
  type SqlSchema,
  type TokenRecord,
} from '../../src/datastore/index.js';
import { runSecretStoreContract } from '../../src/datastore/secrets.contract.js';
import { migrations } from '../../src/datastore/sql/migrations.js';
import { mysqlKysely, postgresKysely } from '../../src/datastore/sql/servers.js';
import { newAppFromJson } from '../../src/models/index.js';
import { runQueueContract } from '../../src/mq/queue.contract.js';
import { databaseQueue } from '../../src/mq/index.js';
import BetterSqlite3 from 'better-sqlite3';
import { SqliteDialect } from 'kysely';
import { DATABASE_KINDS, startDatabase, type TestDatabase } from '../support/databases.js';

const TABLES = ['secrets', 'triggers', 'fns', 'apps', 'calls', 'mq', 'mq_bodies', 'mq_keys', 'tokens', 'changes'] as const;

/** Kysely on `url` without the store: to lay down an old schema. */
function rawKysely(url: string): Kysely<unknown> {
  const loc = parseDbUrl(url);
  if (loc.kind === 'postgres') return postgresKysely<unknown>(loc, { poolSize: 2 });
  if (loc.kind === 'mysql') return mysqlKysely<unknown>(loc, { poolSize: 2 });
  mkdirSync(dirname(loc.path), { recursive: true });
  return new Kysely<unknown>({ dialect: new SqliteDialect({ database: new BetterSqlite3(loc.path) }) });
}

/** Queues `n` one-byte calls of fn f at once (so the queue writes them in groups), ids c<from>... padded to sort in order. */
function queueAtOnce(queue: ReturnType<typeof databaseQueue>, from: number, n: number): Promise<string[]> {
  return Promise.all(Array.from({ length: n }, (_, i) => queue.enqueue({ id: `c${String(from + i).padStart(5, '0')}`, fnId: 'f', callJson: '{}', body: Buffer.from('x'), maxAttempts: 1 })));
}

/**
 * MySQL: once InnoDB's purge has caught up, runs `fn` while a read view is
 * held open on another connection (every index entry removed meanwhile
 * stays, as when the purge lags behind a drain); `pagesRead` counts the
 * buffer pool's page reads of what it is given.
 */
async function underHeldReadView(db: Kysely<SqlSchema>, fn: (pagesRead: (work: () => Promise<unknown>) => Promise<number>) => Promise<void>): Promise<void> {
  const status = async (name: string): Promise<number> => Number((await sql<{ Value: string }>`show global status like ${name}`.execute(db)).rows[0]?.Value);
  const until = Date.now() + 30_000;
  while ((await status('Innodb_history_list_length')) > 0 && Date.now() < until) await new Promise((r) => setTimeout(r, 50));
  await db.connection().execute(async (holder) => {
    await sql`start transaction with consistent snapshot`.execute(holder);
    try {
      await fn(async (work) => {
        const before = await status('Innodb_buffer_pool_read_requests');
        await work();
        return (await status('Innodb_buffer_pool_read_requests')) - before;
      });
    } finally {
      await sql`rollback`.execute(holder);
    }
  });
}

/** Opens (and so migrates) the store in a process of its own: what it printed, and how it ended. */
function openInProcess(url: string): Promise<{ code: number | null; output: string }> {
  return new Promise((resolve) => {
    const child = spawn(process.execPath, ['--import', 'tsx', fileURLToPath(new URL('./fixtures/open-store.ts', import.meta.url)), url], { stdio: ['ignore', 'pipe', 'pipe'] });
    let output = '';
    child.stdout.on('data', (b: Buffer) => (output += b.toString()));
    child.stderr.on('data', (b: Buffer) => (output += b.toString()));
    // 'close', not 'exit': the process has ended and its output has all been read.
    child.on('close', (code) => resolve({ code, output }));
  });
}

/** Applies the migrations up to `last` only, as an older fnts did. */
async function migrateUpTo(url: string, last: string): Promise<void> {
  const db = rawKysely(url);
  try {
    const upTo = Object.fromEntries(Object.entries(migrations).filter(([name]) => name <= last));
    const migrator = new Migrator({ db, provider: { getMigrations: async () => upTo }, migrationTableName: 'fnts_migrations', migrationLockTableName: 'fnts_migrations_lock' });
    const { error } = await migrator.migrateToLatest();
    expect(error).toBeUndefined();
  } finally {
    await db.destroy();
  }
}

for (const kind of DATABASE_KINDS) {
  describe(`the datastore on ${kind}`, () => {
    let server: TestDatabase;
    const urls: { fresh?: string; upgraded?: string } = {};
    beforeAll(async () => {
      server = await startDatabase(kind);
      urls.fresh = await server.newDatabase();
      urls.upgraded = await server.newDatabase();
      await migrateUpTo(urls.upgraded, '0001_initial');
    }, 120_000);
    afterAll(async () => server?.stop());

    /** The store on one of the file's databases, every row of a previous case gone. */
    const storeOn = (which: keyof typeof urls) => async (): Promise<SqlDatastore> => {
      const store = await openSqlDatastore(urls[which]!, { poolSize: 4 });
      for (const t of TABLES) await store.database().deleteFrom(t).execute();
      return store;
    };

    for (const which of ['fresh', 'upgraded'] as const) {
      const label = `${kind}, ${which === 'fresh' ? 'fresh' : 'migrated up from the first schema'}`;
      const open = storeOn(which);
      runDatastoreContract(label, open);
      runCallStoreContract(label, open);
      runSecretStoreContract(label, async () => {
        const store = await open();
        return { datastore: store, secrets: new SqlSecretStore(() => store.database(), new SecretBox(randomBytes(32)), store.disk), close: () => store.close() };
      });
      runQueueContract(label, async (now) => {
        const store = await open();
        return { queue: databaseQueue(store, now), close: () => store.close() };
      });
    }

    it("keeps a small body in its item's row (Postgres, MySQL) and a larger one in chunks, each leased whole, as is a body an older fnts queued", async () => {
      const store = await storeOn('fresh')();
      try {
        const db = store.database();
        const queue = databaseQueue(store);
        // Each body its own buffer, its content kept apart (SQLite's thread takes a buffer's memory).
        const small = '{"name":"small"}';
        const large = Buffer.alloc(5000, 9).toString('hex');
        await queue.enqueue({ id: 's', fnId: 'f', callJson: '{}', body: Buffer.from(small), maxAttempts: 1 });
        await queue.enqueue({ id: 'l', fnId: 'f', callJson: '{}', body: Buffer.from(large, 'hex'), maxAttempts: 1 });
        // Queued by an fnts before 0012_mq_small_body: its body in mq_bodies.
        const at = Date.now();
        await sql`insert into mq (id, fn_id, call_json, body_bytes, attempts, max_attempts, state, enqueued_at, available_at, lease_until, redeliveries)
          values ('o', 'f', '{}', 3, 0, 1, 'ready', ${at}, ${at}, 0, 0)`.execute(db);
        await db
          .insertInto('mq_bodies')
          .values({ id: 'o', seq: 0, chunk: Buffer.from('old'), created_at: at })
          .execute();
        const chunked = await db.selectFrom('mq_bodies').select('id').distinct().orderBy('id').execute();
        expect(chunked.map((r) => r.id)).toEqual(kind === 'sqlite' ? ['l', 'o', 's'] : ['l', 'o']);
        const leased = await queue.reserveBatch(3, 60_000, 'w');
        expect(Object.fromEntries(leased.map((c) => [c.id, c.body.toString('hex')]))).toEqual({ s: Buffer.from(small).toString('hex'), l: large, o: Buffer.from('old').toString('hex') });
      } finally {
        await store.close();
      }
    });

    it('moves small bodies back to mq_bodies when the schema goes back before 0012_mq_small_body, and leases them whole after', async () => {
      const store = await storeOn('fresh')();
      const queue = databaseQueue(store);
      await queue.enqueue({ id: 's', fnId: 'f', callJson: '{}', body: Buffer.from('small'), maxAttempts: 1 });
      await store.close();
      const db = rawKysely(urls.fresh!);
      try {
        await migrations['0012_mq_small_body']!.down!(db);
        const bodies = await sql<{ id: string; chunk: Buffer }>`select id, chunk from mq_bodies`.execute(db);
        expect(bodies.rows.map((r) => `${r.id} ${Buffer.from(r.chunk).toString()}`)).toEqual(['s small']);
        await migrations['0012_mq_small_body']!.up(db);
      } finally {
        await db.destroy();
      }
      const again = await openSqlDatastore(urls.fresh!, { poolSize: 4 });
      try {
        expect((await databaseQueue(again).reserveBatch(1, 60_000, 'w')).map((c) => c.body.toString())).toEqual(['small']);
      } finally {
        await again.close();
      }
    });

    it("removes calls' bodies, every chunk, with their items when calls acknowledged together are, and no other body", async () => {
      const store = await storeOn('fresh')();
      try {
        const queue = databaseQueue(store);
        // Bodies of several chunks, each its own buffer (SQLite's thread takes a buffer's memory).
        for (const [id, bytes] of [
          ['a', 600 * 1024],
          ['b', 1],
          ['c', 600 * 1024],
        ] as const)
          await queue.enqueue({ id, fnId: 'f', callJson: '{}', body: Buffer.alloc(bytes, 7), maxAttempts: 1 });
        expect(await queue.reserveBatch(3, 60_000, 'w')).toHaveLength(3);
        await Promise.all([queue.ack('a'), queue.ack('b')]);
        const bodies = await store.database().selectFrom('mq_bodies').select('id').distinct().execute();
        expect(bodies).toEqual([{ id: 'c' }]);
        expect(await queue.has(['a', 'b', 'c'])).toEqual(new Set(['c']));
      } finally {
        await store.close();
      }
    });

    it.runIf(kind === 'postgres')('has the queue analyzed as a backlog builds, so that a lease takes the oldest calls through the index, not a sort of every waiting one', async () => {
      const store = await storeOn('fresh')();
      try {
        const db = store.database();
        const analyses = async (): Promise<number> => {
          const { rows } = await sql<{ n: string }>`select analyze_count as n from pg_stat_user_tables where relname = 'mq'`.execute(db);
          return Number(rows[0]?.n ?? 0);
        };
        const queue = databaseQueue(store);
        const before = await analyses();
        await queueAtOnce(queue, 0, 3000);
        const until = Date.now() + 10_000;
        while ((await analyses()) <= before && Date.now() < until) await new Promise((r) => setTimeout(r, 100));
        expect(await analyses()).toBeGreaterThan(before);
        // The pick a lease makes, as Postgres now plans it: in the index's order, no sort of the 3,000.
        const { rows } = await sql<{ 'QUERY PLAN': string }>`explain select id from mq where state = 'ready' and available_at <= ${Date.now()}
            order by available_at, enqueued_at limit 16 for update skip locked`.execute(db);
        const plan = rows.map((r) => r['QUERY PLAN']).join('\n');
        expect(plan).toContain('Index Scan');
        expect(plan).not.toContain('Sort');
        const leased = await queue.reserveBatch(16, 60_000, 'w');
        expect(new Set(leased.map((c) => c.id)).size).toBe(16);
      } finally {
        await store.close();
      }
    });

    it('finds leases that ended through their own index, not by reading every call in flight, and takes them back first', async () => {
      const store = await storeOn('fresh')();
      try {
        const db = store.database();
        let now = Date.now();
        const queue = databaseQueue(store, () => now);
        // 130 calls in flight, as on a busy node, ten of them on a shorter lease; 2,870 waiting, queued later.
        await queueAtOnce(queue, 0, 130);
        now += 1;
        await queueAtOnce(queue, 130, 2870);
        const short = await queue.reserveBatch(10, 1_000, 'w');
        expect(await queue.reserveBatch(120, 60_000, 'w')).toHaveLength(120);
        await sql.raw(kind === 'mysql' ? 'analyze table mq' : 'analyze').execute(db);
        // The pick of lapsed leases as each database plans it (SQLite's queue has no row locks to take).
        const pick = sql`select id from mq where state = 'leased' and lease_until <= ${now} order by lease_until limit 16 ${kind === 'sqlite' ? sql`` : sql`for update skip locked`}`;
        const plan = {
          mysql: async () => (await sql<{ key: string | null }>`explain ${pick}`.execute(db)).rows.map((r) => r.key ?? ''),
          postgres: async () => (await sql<{ 'QUERY PLAN': string }>`explain ${pick}`.execute(db)).rows.map((r) => r['QUERY PLAN']),
          sqlite: async () => (await sql<{ detail: string }>`explain query plan ${pick}`.execute(db)).rows.map((r) => r.detail),
        }[kind];
        expect((await plan()).join('\n')).toContain('mq_lapsed_idx');
        now += 2_000;
        const taken = await queue.reserveBatch(16, 60_000, 'w2');
        const byId = (a: string, b: string) => a.localeCompare(b);
        expect(
          taken
            .slice(0, 10)
            .map((c) => `${c.id} ${c.redeliveries}`)
            .sort(byId),
        ).toEqual(short.map((c) => `${c.id} 1`).sort(byId));
        expect(taken.slice(10).every((c) => c.redeliveries === 0)).toBe(true);
      } finally {
        await store.close();
      }
    });
    it.runIf(kind === 'mysql')("leases in a few pages read while the calls acknowledged lately await InnoDB's purge (the lapsed pick read past every one of them)", async () => {
      const store = await storeOn('fresh')();
      try {
        const db = store.database();
        const queue = databaseQueue(store);
        await queueAtOnce(queue, 0, 400);
        // 390 calls run and are acknowledged; 10 leased later (their leases end after those) still run.
        const acked = await queue.reserveBatch(390, 60_000, 'w');
        expect(acked).toHaveLength(390);
        expect(await queue.reserveBatch(10, 120_000, 'w')).toHaveLength(10);
        // The lease's own changes purged first (the ready items it moved), as a drain's older ones are; then
        // a read view held open keeps every entry removed after it.
        await underHeldReadView(db, async (pagesRead) => {
          await Promise.all(acked.map((c) => queue.ack(c.id)));
          // Nothing lapsed, nothing ready: both picks find nothing.
          const pages = await pagesRead(async () => expect(await queue.reserveBatch(16, 60_000, 'w2')).toEqual([]));
          // Read forward, the lapsed pick walked the 390 acknowledged calls' entries: 788 pages (6 backward).
          expect(pages).toBeLessThan(200);
        });
      } finally {
        await store.close();
      }
    });
    it.runIf(kind === 'mysql')("leases the next ready calls in a few pages read while the ones leased before await InnoDB's purge (each pick read past all of them)", async () => {
      const store = await storeOn('fresh')();
      try {
        const db = store.database();
        let now = Date.now();
        const queue = databaseQueue(store, () => now);
        // 420 calls queued in groups of 20 a millisecond apart, as a busy intake writes them.
        for (let g = 0; g < 21; g++, now++) await queueAtOnce(queue, g * 20, 20);
        // The entries every lease moves out of `ready` are kept.
        await underHeldReadView(db, async (pagesRead) => {
          const leased: string[] = [];
          for (let i = 0; i < 25; i++) leased.push(...(await queue.reserveBatch(16, 60_000, 'w')).map((c) => c.id));
          expect(leased).toEqual(Array.from({ length: 400 }, (_, i) => `c${String(i).padStart(5, '0')}`));
          let next: string[] = [];
          const pages = await pagesRead(async () => (next = (await queue.reserveBatch(16, 60_000, 'w')).map((c) => c.id)));
          expect(next).toEqual(Array.from({ length: 16 }, (_, i) => `c${String(400 + i).padStart(5, '0')}`));
          // Picked from the oldest item, the lease walked the 400 leased calls' entries: 1,064 pages (300 from where the last pick ended).
          expect(pages).toBeLessThan(500);
        });
      } finally {
        await store.close();
      }
    });
    it('leases a call that became ready behind older ones already leased (a dead holder released, another server queued it late) no later than a second after', async () => {
      const store = await storeOn('fresh')();
      try {
        const db = store.database();
        let now = Date.now();
        const queue = databaseQueue(store, () => now);
        for (let g = 0; g < 8; g++, now++) await queueAtOnce(queue, g * 20, 20);
        expect(await queue.reserveBatch(16, 60_000, 'w')).toHaveLength(16);
        expect(await queue.reserveBatch(16, 60_000, 'w')).toHaveLength(16);
        // A call as old as the first ones, ready again now (as releaseDead leaves one: its age kept).
        await db.updateTable('mq').set({ state: 'ready', lease_until: 0, leased_by: null }).where('id', '=', 'c00003').execute();
        const seen = (await queue.reserveBatch(16, 60_000, 'w')).map((c) => c.id);
        now += 1000;
        seen.push(...(await queue.reserveBatch(16, 60_000, 'w')).map((c) => c.id));
        expect(seen).toContain('c00003');
        expect(new Set(seen).size).toBe(32);
        // The others in age order, the backlog still there (every pick came back full).
        const others = seen.filter((id) => id !== 'c00003');
        expect(others).toEqual(Array.from({ length: 31 }, (_, i) => `c${String(32 + i).padStart(5, '0')}`));
      } finally {
        await store.close();
      }
    });
    it.runIf(kind === 'mysql')(
      "sends the queue's statements several to a round trip on connections of their own: a batch that fails is rolled back, values are bound, never spliced, and the datastore's connections take one statement a query",
      async () => {
        const store = await storeOn('fresh')();
        try {
          const queue = databaseQueue(store);
          await queue.enqueue({ id: 'b1', fnId: 'f', callJson: '{}', body: Buffer.from('x'), maxAttempts: 1 });
          const batches = store.statementBatches()!;
          const failed = batches.session(async (send) => {
            await send([
              { text: 'start transaction', values: [] },
              { text: "update mq set state = 'dead' where id = ?", values: ['b1'] },
            ]);
            await send([{ text: 'select nothing from nowhere', values: [] }]);
          });
          await expect(failed).rejects.toThrow(/nowhere/);
          // Rolled back at once, its lock released: the call is there to lease, as it was.
          expect((await queue.reserveBatch(5, 60_000, 'w')).map((c) => c.id)).toEqual(['b1']);
          const [echoed] = await batches.session((send) => send([{ text: 'select ? as v', values: ["x'; delete from mq; --"] }]));
          expect(echoed).toEqual([{ v: "x'; delete from mq; --" }]);
          expect(await queue.has(['b1'])).toEqual(new Set(['b1']));
          await expect(sql`select 1; select 2`.execute(store.database())).rejects.toThrow(/syntax/);
        } finally {
          await store.close();
        }
      },
    );

    it('keeps API tokens (their digests) as given, oldest first, and removes them once', async () => {
      const store = await storeOn('fresh')();
      try {
        const t = (id: string, at: string, extra: Partial<TokenRecord> = {}): TokenRecord => ({
          id,
          name: `n-${id}`,
          role: 'developer',
          apps: undefined,
          digest: 'ab'.repeat(32),
          created_at: at,
          expires_at: undefined,
          ...extra,
        });
        const second = t('t2', '2026-11-26T10:00:01.000Z', { apps: ['a', 'B'], expires_at: '2027-01-01T00:00:00.000Z' });
        await store.tokens.insertToken(second);
        await store.tokens.insertToken(t('t1', '2026-11-26T10:00:00.000Z'));
        expect(await store.tokens.listTokens()).toEqual([t('t1', '2026-11-26T10:00:00.000Z'), second]);
        await expect(store.tokens.insertToken(t('t1', '2026-11-26T10:00:02.000Z'))).rejects.toThrow();
        expect(await store.tokens.removeToken('t1')).toBe(true);
        expect(await store.tokens.removeToken('t1')).toBe(false);
        expect((await store.tokens.listTokens()).map((x) => x.id)).toEqual(['t2']);
      } finally {
        await store.close();
      }
    });

    it.runIf(kind !== 'sqlite')('prunes call records on one node at a time: a node that finds another pruning skips its turn', async () => {
      const store = await storeOn('fresh')();
      try {
        const old = { id: 'C1', status: 'success', app_id: 'A', fn_id: 'F', created_at: '2020-01-01T00:00:00.000Z', stats: [] };
        await store.calls.insert([old as never]);
        await store
          .database()
          .connection()
          .execute(async (other) => {
            // Another node's prune in progress: it holds the lock.
            if (kind === 'postgres') await sql`select pg_advisory_lock(${sql.lit(0x666e747301n)})`.execute(other);
            else await sql`select get_lock('fnts.calls.prune', 10)`.execute(other);
            expect(await store.calls.prune('2021-01-01T00:00:00.000Z', 100)).toBe(0);
            if (kind === 'postgres') await sql`select pg_advisory_unlock(${sql.lit(0x666e747301n)})`.execute(other);
            else await sql`select release_lock('fnts.calls.prune')`.execute(other);
          });
        expect(await store.calls.prune('2021-01-01T00:00:00.000Z', 100)).toBe(1);
      } finally {
        await store.close();
      }
    });

    it('lets any number of nodes start at the same moment on an empty database: all come up, on one schema', async () => {
      const url = await server.newDatabase();
      // Each a process of its own, as nodes are (SQLite's lock waits block the thread that waits).
      const runs = await Promise.all(Array.from({ length: 5 }, () => openInProcess(url)));
      for (const r of runs) expect(r, r.output).toMatchObject({ code: 0, output: `applied ${Object.keys(migrations).length}\n` });
      const store = await openSqlDatastore(url, { poolSize: 2 });
      try {
        const a = await store.insertApp(newAppFromJson({ name: 'after-the-race' }));
        expect(await store.getAppById(a.id)).toEqual(a);
      } finally {
        await store.close();
      }
    });

    it('refuses a database a newer fnts has migrated, naming what it found, and leaves it as it was', async () => {
      const url = await server.newDatabase();
      const first = await openSqlDatastore(url, { poolSize: 2 });
      await first
        .database()
        .insertInto('fnts_migrations' as never)
        .values({ name: '9999_from_the_future', timestamp: new Date().toISOString() } as never)
        .execute();
      await first.close();
      const refused = openSqlDatastore(url, { poolSize: 2 });
      await expect(refused).rejects.toBeInstanceOf(SchemaTooNewError);
      await expect(refused).rejects.toThrow(`it has migration 9999_from_the_future; this fnts knows up to ${SCHEMA_VERSION}`);
    });
  });
}

for (const kind of DATABASE_KINDS.filter((k) => k !== 'sqlite')) {
  describe(`a ${kind} server that stops answering`, () => {
    let server: TestDatabase;
    let store: SqlDatastore;
    beforeAll(async () => {
      server = await startDatabase(kind);
      store = await openSqlDatastore(await server.newDatabase(), { poolSize: 4 });
    }, 120_000);
    afterAll(async () => {
      await store?.close();
      await server?.stop();
    });

    it('answers 503 within 2 s while it is down, stores nothing half-done, and serves again by itself once it is back', async () => {
      const kept = await store.insertApp(newAppFromJson({ name: 'before' }));
      const queue = databaseQueue(store);
      await server.kill();

      for (const [what, attempt] of [
        ['read an app', () => store.getAppById(kept.id)],
        ['insert an app', () => store.insertApp(newAppFromJson({ name: 'during' }))],
        ['queue a call', () => queue.enqueue({ id: 'c1', fnId: 'f', callJson: '{}', body: Buffer.from('x'), maxAttempts: 1 })],
        ['lease calls', () => queue.reserveBatch(4, 60_000, 'w')],
        ['ping', () => store.ping()],
      ] as const) {
        const started = Date.now();
        const failure = await attempt().then(
          () => undefined,
          (err: unknown) => err,
        );
        const tookMs = Date.now() - started;
        expect(failure instanceof DatabaseUnavailableError || (failure as Error | undefined)?.cause instanceof DatabaseUnavailableError, `${what}: ${String(failure)}`).toBe(true);
        expect(tookMs).toBeLessThan(2500);
      }

      await server.start();
      // The pool makes new connections by itself: the first requests after the restart succeed.
      const deadline = Date.now() + 15_000;
      let back = false;
      while (!back && Date.now() < deadline) {
        back = await store.getAppById(kept.id).then(
          () => true,
          () => false,
        );
        if (!back) await new Promise((r) => setTimeout(r, 100));
      }
      expect(back).toBe(true);
      expect(await store.getAppById(kept.id)).toEqual(kept);
      await expect(store.getAppByName('during')).rejects.toThrow();
      expect(await queue.has(['c1'])).toEqual(new Set());
      await queue.enqueue({ id: 'c2', fnId: 'f', callJson: '{}', body: Buffer.from('x'), maxAttempts: 1 });
      expect(await queue.has(['c2'])).toEqual(new Set(['c2']));
      // The lease and the acknowledgement (MySQL: over connections of their own) serve again too.
      expect((await queue.reserveBatch(4, 60_000, 'w')).map((c) => c.id)).toEqual(['c2']);
      await queue.ack('c2');
      expect(await queue.has(['c2'])).toEqual(new Set());
    });
  });
}
