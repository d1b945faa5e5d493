/**
 * Schema migrations, applied in name order at startup by Kysely's Migrator
 * (under the database's lock: store.ts). Written with Kysely's schema
 * builder so the same migrations run on SQLite, Postgres and MySQL; where
 * the databases differ, `kinds.ts` says how (column types, collation). On
 * SQLite they make exactly the tables they always made. Never edit a
 * released migration: add a new one.
 */
import { sql, type Kysely, type Migration } from 'kysely';
import { blob, createTable, kindOf, str, text } from './kinds.js';

// Text columns hold names and ids compared bytewise; JSON columns hold config
// and annotations; timestamps are RFC 3339 strings in UTC (sortable as text).
const m0001: Migration = {
  async up(db: Kysely<unknown>): Promise<void> {
    await createTable(db, 'apps')
      .addColumn('id', str(db, 64), (c) => c.primaryKey())
      .addColumn('name', str(db, 255), (c) => c.notNull().unique())
      .addColumn('config', text(db), (c) => c.notNull())
      .addColumn('annotations', text(db), (c) => c.notNull())
      .addColumn('syslog_url', text(db))
      .addColumn('shape', str(db, 32), (c) => c.notNull())
      .addColumn('created_at', str(db, 32), (c) => c.notNull())
      .addColumn('updated_at', str(db, 32), (c) => c.notNull())
      .execute();

    await createTable(db, 'fns')
      .addColumn('id', str(db, 64), (c) => c.primaryKey())
      .addColumn('name', str(db, 255), (c) => c.notNull())
      .addColumn('app_id', str(db, 64), (c) => c.notNull().references('apps.id').onDelete('cascade'))
      .addColumn('image', text(db), (c) => c.notNull())
      .addColumn('memory', 'bigint', (c) => c.notNull())
      .addColumn('timeout', 'integer', (c) => c.notNull())
      .addColumn('idle_timeout', 'integer', (c) => c.notNull())
      .addColumn('config', text(db), (c) => c.notNull())
      .addColumn('annotations', text(db), (c) => c.notNull())
      .addColumn('shape', str(db, 32), (c) => c.notNull())
      .addColumn('created_at', str(db, 32), (c) => c.notNull())
      .addColumn('updated_at', str(db, 32), (c) => c.notNull())
      .addUniqueConstraint('fns_app_id_name_unique', ['app_id', 'name'])
      .execute();

    await createTable(db, 'triggers')
      .addColumn('id', str(db, 64), (c) => c.primaryKey())
      .addColumn('name', str(db, 255), (c) => c.notNull())
      .addColumn('app_id', str(db, 64), (c) => c.notNull().references('apps.id').onDelete('cascade'))
      .addColumn('fn_id', str(db, 64), (c) => c.notNull().references('fns.id').onDelete('cascade'))
      .addColumn('type', str(db, 32), (c) => c.notNull())
      .addColumn('source', text(db), (c) => c.notNull())
      .addColumn('annotations', text(db), (c) => c.notNull())
      .addColumn('created_at', str(db, 32), (c) => c.notNull())
      .addColumn('updated_at', str(db, 32), (c) => c.notNull())
      .addUniqueConstraint('triggers_app_id_fn_id_name_unique', ['app_id', 'fn_id', 'name'])
      // MySQL indexes a text column by a prefix only: there, the same constraint is an index made below.
      .$call((b) => (kindOf(db) === 'mysql' ? b : b.addUniqueConstraint('triggers_app_id_type_source_unique', ['app_id', 'type', 'source'])))
      .execute();
    if (kindOf(db) === 'mysql') await sql`CREATE UNIQUE INDEX triggers_app_id_type_source_unique ON triggers (app_id, type, source(512))`.execute(db);

    await db.schema.createIndex('fns_app_id_idx').on('fns').column('app_id').execute();
    await db.schema.createIndex('triggers_fn_id_idx').on('triggers').column('fn_id').execute();
    // Keeps the name-ordered trigger listing of an app an index scan.
    await db.schema.createIndex('triggers_app_id_name_idx').on('triggers').columns(['app_id', 'name', 'id']).execute();
  },
  async down(db: Kysely<unknown>): Promise<void> {
    await db.schema.dropTable('triggers').execute();
    await db.schema.dropTable('fns').execute();
    await db.schema.dropTable('apps').execute();
  },
};

// fns.format: how the agent talks to the container (issue: stdio and cold formats).
const m0002: Migration = {
  async up(db: Kysely<unknown>): Promise<void> {
    await db.schema
      .alterTable('fns')
      .addColumn('format', str(db, 32), (c) => c.notNull().defaultTo('http-stream'))
      .execute();
  },
  async down(db: Kysely<unknown>): Promise<void> {
    await db.schema.alterTable('fns').dropColumn('format').execute();
  },
};

// Call records and their logs (the calls API). A record is a JSON document
// beside the columns it is found and ordered by; logs live apart, as Fn keeps them.
const m0003: Migration = {
  async up(db: Kysely<unknown>): Promise<void> {
    await createTable(db, 'calls')
      .addColumn('id', str(db, 64), (c) => c.primaryKey())
      .addColumn('fn_id', str(db, 64), (c) => c.notNull())
      .addColumn('app_id', str(db, 64), (c) => c.notNull())
      .addColumn('status', str(db, 16), (c) => c.notNull())
      .addColumn('created_at', str(db, 32), (c) => c.notNull())
      .addColumn('record', text(db), (c) => c.notNull())
      .execute();
    await db.schema.createIndex('calls_fn_id_created_at_idx').on('calls').columns(['fn_id', 'created_at', 'id']).execute();
    await db.schema.createIndex('calls_created_at_idx').on('calls').column('created_at').execute();
    await createTable(db, 'call_logs')
      .addColumn('call_id', str(db, 64), (c) => c.primaryKey())
      .addColumn('fn_id', str(db, 64), (c) => c.notNull())
      .addColumn('log', text(db), (c) => c.notNull())
      .execute();
  },
  async down(db: Kysely<unknown>): Promise<void> {
    await db.schema.dropTable('call_logs').execute();
    await db.schema.dropTable('calls').execute();
  },
};

// The embedded queue of detached calls (mq/sql.ts), in the same database.
const m0004: Migration = {
  async up(db: Kysely<unknown>): Promise<void> {
    await createTable(db, 'mq')
      .addColumn('id', str(db, 64), (c) => c.primaryKey())
      .addColumn('fn_id', str(db, 64), (c) => c.notNull())
      .addColumn('call_json', text(db), (c) => c.notNull())
      .addColumn('body', blob(db), (c) => c.notNull())
      .addColumn('attempts', 'integer', (c) => c.notNull())
      .addColumn('max_attempts', 'integer', (c) => c.notNull())
      .addColumn('state', str(db, 16), (c) => c.notNull())
      .addColumn('enqueued_at', 'bigint', (c) => c.notNull())
      .addColumn('available_at', 'bigint', (c) => c.notNull())
      .addColumn('lease_until', 'bigint', (c) => c.notNull())
      .addColumn('leased_by', str(db, 255))
      .addColumn('reason', text(db))
      .execute();
    await db.schema.createIndex('mq_state_available_idx').on('mq').columns(['state', 'available_at', 'enqueued_at']).execute();
    // Fn-Idempotency-Key: the call a key of a fn named, for a day.
    await createTable(db, 'mq_keys')
      .addColumn('fn_id', str(db, 64), (c) => c.notNull())
      .addColumn('key', str(db, 255), (c) => c.notNull())
      .addColumn('call_id', str(db, 64), (c) => c.notNull())
      .addColumn('created_at', 'bigint', (c) => c.notNull())
      .addPrimaryKeyConstraint('mq_keys_pk', ['fn_id', 'key'])
      .execute();
  },
  async down(db: Kysely<unknown>): Promise<void> {
    await db.schema.dropTable('mq_keys').execute();
    await db.schema.dropTable('mq').execute();
  },
};

// A call's log moves onto its record's row: one row written per call rather
// than two, and a pruned record takes its log with it.
const m0005: Migration = {
  async up(db: Kysely<unknown>): Promise<void> {
    await db.schema.alterTable('calls').addColumn('log', text(db)).execute();
    await sql`UPDATE calls SET log = (SELECT log FROM call_logs WHERE call_logs.call_id = calls.id)`.execute(db);
    await db.schema.dropTable('call_logs').execute();
  },
  async down(db: Kysely<unknown>): Promise<void> {
    await createTable(db, 'call_logs')
      .addColumn('call_id', str(db, 64), (c) => c.primaryKey())
      .addColumn('fn_id', str(db, 64), (c) => c.notNull())
      .addColumn('log', text(db), (c) => c.notNull())
      .execute();
    await sql`INSERT INTO call_logs (call_id, fn_id, log) SELECT id, fn_id, log FROM calls WHERE log IS NOT NULL`.execute(db);
    await db.schema.alterTable('calls').dropColumn('log').execute();
  },
};

// Poison calls and dead letters (mq/queue.ts): how often an item's lease was
// taken back from a holder that died, and since when a dead item is dead (its
// body goes with it after the call retention; items already dead count from
// this upgrade). Bodies move to a table of their own, in chunks, so that the
// item's row, updated at every lease, stays small (mq/sql.ts). The
// reconciler of queued records finds its rows by status.
const m0006: Migration = {
  async up(db: Kysely<unknown>): Promise<void> {
    await db.schema
      .alterTable('mq')
      .addColumn('redeliveries', 'integer', (c) => c.notNull().defaultTo(0))
      .execute();
    await db.schema.alterTable('mq').addColumn('dead_at', 'bigint').execute();
    await sql`UPDATE mq SET dead_at = ${Date.now()} WHERE state = 'dead'`.execute(db);
    await createTable(db, 'mq_bodies')
      .addColumn('id', str(db, 64), (c) => c.notNull())
      .addColumn('seq', 'integer', (c) => c.notNull())
      .addColumn('chunk', blob(db), (c) => c.notNull())
      .addColumn('created_at', 'bigint', (c) => c.notNull())
      .addPrimaryKeyConstraint('mq_bodies_pk', ['id', 'seq'])
      .execute();
    await sql`INSERT INTO mq_bodies (id, seq, chunk, created_at) SELECT id, 0, body, enqueued_at FROM mq WHERE length(body) > 0`.execute(db);
    await db.schema
      .alterTable('mq')
      .addColumn('body_bytes', 'bigint', (c) => c.notNull().defaultTo(0))
      .execute();
    await sql`UPDATE mq SET body_bytes = length(body)`.execute(db);
    await db.schema.alterTable('mq').dropColumn('body').execute();
    await db.schema.createIndex('calls_status_created_at_idx').on('calls').columns(['status', 'created_at']).execute();
  },
  async down(db: Kysely<unknown>): Promise<void> {
    await db.schema.dropIndex('calls_status_created_at_idx').execute();
    await db.schema
      .alterTable('mq')
      .addColumn('body', blob(db), (c) => c.notNull().defaultTo(sql`x''`))
      .execute();
    // SQL has no concatenation of blobs that stays a blob: joined here.
    const chunks = await sql<{ id: string; chunk: Buffer }>`SELECT id, chunk FROM mq_bodies ORDER BY id, seq`.execute(db);
    const bodies = new Map<string, Buffer[]>();
    for (const { id, chunk } of chunks.rows) (bodies.get(id) ?? bodies.set(id, []).get(id)!).push(chunk);
    for (const [id, parts] of bodies) await sql`UPDATE mq SET body = ${Buffer.concat(parts)} WHERE id = ${id}`.execute(db);
    await db.schema.alterTable('mq').dropColumn('body_bytes').execute();
    await db.schema.dropTable('mq_bodies').execute();
    await db.schema.alterTable('mq').dropColumn('dead_at').execute();
    await db.schema.alterTable('mq').dropColumn('redeliveries').execute();
  },
};

// API tokens (auth/): only digests are stored.
const m0007: Migration = {
  async up(db: Kysely<unknown>): Promise<void> {
    await createTable(db, 'tokens')
      .addColumn('id', str(db, 32), (c) => c.primaryKey())
      .addColumn('name', str(db, 255), (c) => c.notNull())
      .addColumn('role', str(db, 32), (c) => c.notNull())
      .addColumn('apps', text(db))
      .addColumn('digest', str(db, 64), (c) => c.notNull())
      .addColumn('created_at', str(db, 32), (c) => c.notNull())
      .addColumn('expires_at', str(db, 32))
      .execute();
  },
  async down(db: Kysely<unknown>): Promise<void> {
    await db.schema.dropTable('tokens').execute();
  },
};

// Secrets of apps and fns (datastore/secrets.ts), one table for both kinds
// of owner: a row is found by (owner_kind, owner_id, name); app_id (every
// row's app: the owner, or the owning fn's app) and fn_id (fn secrets
// only) cascade deletes as the store also does explicitly. `value` is
// sealed (secret-box.ts), never the value itself; key_id is the sealing
// key's fingerprint, so a server started with another key says so at once.
// 0007 is the token tables' (authentication).
const m0008: Migration = {
  async up(db: Kysely<unknown>): Promise<void> {
    await createTable(db, 'secrets')
      .addColumn('owner_kind', str(db, 8), (c) => c.notNull())
      .addColumn('owner_id', str(db, 64), (c) => c.notNull())
      .addColumn('name', str(db, 255), (c) => c.notNull())
      .addColumn('app_id', str(db, 64), (c) => c.notNull().references('apps.id').onDelete('cascade'))
      .addColumn('fn_id', str(db, 64), (c) => c.references('fns.id').onDelete('cascade'))
      .addColumn('value', blob(db), (c) => c.notNull())
      .addColumn('version', str(db, 32), (c) => c.notNull())
      .addColumn('key_id', str(db, 32), (c) => c.notNull())
      .addColumn('created_at', str(db, 32), (c) => c.notNull())
      .addColumn('updated_at', str(db, 32), (c) => c.notNull())
      .addPrimaryKeyConstraint('secrets_pk', ['owner_kind', 'owner_id', 'name'])
      .execute();
    await db.schema.createIndex('secrets_app_id_idx').on('secrets').column('app_id').execute();
    await db.schema.createIndex('secrets_fn_id_idx').on('secrets').column('fn_id').execute();
  },
  async down(db: Kysely<unknown>): Promise<void> {
    await db.schema.dropTable('secrets').execute();
  },
};

// Changes made to apps, fns and triggers, for the other nodes on this
// database (change-feed.ts): polled by id on MySQL and SQLite (Postgres
// tells them with NOTIFY), pruned after a few minutes.
const m0009: Migration = {
  async up(db: Kysely<unknown>): Promise<void> {
    const kind = kindOf(db);
    await createTable(db, 'changes')
      .$call((b) => (kind === 'postgres' ? b.addColumn('id', 'bigserial', (c) => c.primaryKey()) : b.addColumn('id', 'integer', (c) => c.primaryKey().autoIncrement())))
      .addColumn('origin', str(db, 64), (c) => c.notNull())
      .addColumn('body', text(db), (c) => c.notNull())
      .addColumn('at', 'bigint', (c) => c.notNull())
      .execute();
    await db.schema.createIndex('changes_at_idx').on('changes').column('at').execute();
  },
  async down(db: Kysely<unknown>): Promise<void> {
    await db.schema.dropTable('changes').execute();
  },
};

// Each fn's idle-time histogram for the keep-alive policy (issue 27,
// keepalive.ts): one small document per fn, rewritten at most once a
// minute, gone with its fn.
const m0010: Migration = {
  async up(db: Kysely<unknown>): Promise<void> {
    await createTable(db, 'keepalive_histograms')
      .addColumn('fn_id', str(db, 64), (c) => c.primaryKey().references('fns.id').onDelete('cascade'))
      .addColumn('data', text(db), (c) => c.notNull())
      .addColumn('updated_at', 'bigint', (c) => c.notNull())
      .execute();
  },
  async down(db: Kysely<unknown>): Promise<void> {
    await db.schema.dropTable('keepalive_histograms').execute();
  },
};

// Leases that ended (their holders died or stalled) found by an index of
// when they end, where every lease read each call in flight to find none:
// on MariaDB with 512 calls in flight (a wide drain) the pick took 1.28 ms
// a lease, 0.38 ms with it. Postgres and SQLite index only leased items (a
// partial index); MySQL has no partial index.
const m0011: Migration = {
  async up(db: Kysely<unknown>): Promise<void> {
    const index = db.schema.createIndex('mq_lapsed_idx').on('mq');
    if (kindOf(db) === 'mysql') await index.columns(['state', 'lease_until']).execute();
    else await index.column('lease_until').where(sql.ref('state'), '=', 'leased').execute();
  },
  async down(db: Kysely<unknown>): Promise<void> {
    await db.schema
      .dropIndex('mq_lapsed_idx')
      .$call((b) => (kindOf(db) === 'mysql' ? b.on('mq') : b))
      .execute();
  },
};

// Small bodies in their item's row (mq/sql.ts: SMALL_BODY_BYTES): a call
// queued, leased and acknowledged touches one table, not two; on MySQL a
// group of calls is queued in one INSERT instead of a transaction of four
// round trips. Bodies already queued stay in mq_bodies, where they are read
// as before.
const m0012: Migration = {
  async up(db: Kysely<unknown>): Promise<void> {
    await db.schema.alterTable('mq').addColumn('small_body', blob(db)).execute();
  },
  async down(db: Kysely<unknown>): Promise<void> {
    await sql`INSERT INTO mq_bodies (id, seq, chunk, created_at) SELECT id, 0, small_body, enqueued_at FROM mq WHERE small_body IS NOT NULL`.execute(db);
    await db.schema.alterTable('mq').dropColumn('small_body').execute();
  },
};

export const migrations: Record<string, Migration> = {
  '0001_initial': m0001,
  '0002_fn_format': m0002,
  '0003_calls': m0003,
  '0004_mq': m0004,
  '0005_call_logs_inline': m0005,
  '0006_mq_redeliveries': m0006,
  '0007_tokens': m0007,
  '0008_secrets': m0008,
  '0009_changes': m0009,
  '0010_keepalive_histograms': m0010,
  '0011_mq_lapsed_idx': m0011,
  '0012_mq_small_body': m0012,
};
