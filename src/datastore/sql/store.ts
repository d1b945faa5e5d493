/**
 * SqlDatastore: the Datastore on Kysely. The queries are dialect-neutral, so
 * the same class serves the embedded SQLite file, Postgres and MySQL; only
 * `openSqlDatastore` (dialects.ts, servers.ts) knows how to reach each, and
 * the migrations (kinds.ts) how their column types differ.
 */
import { Migrator, sql, type Kysely, type Selectable, type Transaction } from 'kysely';
import type { App, AppShape, Fn, FnFormat, Trigger, TriggerType } from '../../models/index.js';
import { ApiError, E, type ErrorDef } from '../../models/index.js';
import type { AppFilter, Datastore, FnFilter, Page, TriggerFilter } from '../datastore.js';
import { decodeCursor } from '../cursor.js';
import { DatabaseBusyError, DiskWatch } from '../storage.js';
import { SqlCallStore, type BatchWriter } from './calls.js';
import { migrations } from './migrations.js';
import { SqlTokenStore } from './tokens.js';
import { SqlKeepAliveStore } from './keepalive.js';
import { limitOf, toPage } from './paging.js';
import type { SqlKind } from './kinds.js';
import type { DbLocation } from '../../config/index.js';
import type { AppsTable, FnsTable, Schema, TriggersTable } from './schema.js';
import type { SqliteThread } from './sqlite-thread.js';
import type { StatementBatches } from './statement-batches.js';

export type { AppsTable, CallsTable, FnsTable, MqTable, Schema, SecretsTable, TriggersTable } from './schema.js';

export class DatastoreClosedError extends Error {
  override readonly name = 'DatastoreClosedError';
  constructor() {
    super('datastore is closed');
  }
}

type Db = Kysely<Schema> | Transaction<Schema>;

const MIGRATION_TABLE = 'fnts_migrations';
/** The newest migration this fnts knows. */
export const SCHEMA_VERSION = Object.keys(migrations).sort().at(-1)!;

/** The database was migrated by a newer fnts: this one would misread it, so it does not start. */
export class SchemaTooNewError extends Error {
  override readonly name = 'SchemaTooNewError';
  constructor(
    where: string,
    readonly unknown: readonly string[],
  ) {
    super(
      `the database ${where} has a newer schema than this fnts knows (it has migration ${unknown.join(', ')}; this fnts knows up to ${SCHEMA_VERSION}): ` +
        'run the newer fnts release on this node too, or point FN_DB_URL at another database',
    );
  }
}

const appRow = (a: App): AppsTable => ({
  id: a.id,
  name: a.name,
  config: JSON.stringify(a.config),
  annotations: JSON.stringify(a.annotations),
  syslog_url: a.syslog_url ?? null,
  // '' is no shape: the column predates optional shapes and is NOT NULL.
  shape: a.shape ?? '',
  created_at: a.created_at,
  updated_at: a.updated_at,
});

const toApp = (r: Selectable<AppsTable>): App => ({
  id: r.id,
  name: r.name,
  config: JSON.parse(r.config) as App['config'],
  annotations: JSON.parse(r.annotations) as App['annotations'],
  syslog_url: r.syslog_url ?? undefined,
  shape: r.shape === '' ? undefined : (r.shape as AppShape),
  created_at: r.created_at,
  updated_at: r.updated_at,
});

const fnRow = (f: Fn): FnsTable => ({
  id: f.id,
  name: f.name,
  app_id: f.app_id,
  image: f.image,
  memory: f.memory,
  timeout: f.timeout,
  idle_timeout: f.idle_timeout,
  format: f.format,
  config: JSON.stringify(f.config),
  annotations: JSON.stringify(f.annotations),
  shape: f.shape ?? '',
  created_at: f.created_at,
  updated_at: f.updated_at,
});

const toFn = (r: Selectable<FnsTable>): Fn => ({
  id: r.id,
  name: r.name,
  app_id: r.app_id,
  image: r.image,
  // Postgres returns bigint as a string.
  memory: Number(r.memory),
  timeout: Number(r.timeout),
  idle_timeout: Number(r.idle_timeout),
  format: r.format as FnFormat,
  config: JSON.parse(r.config) as Fn['config'],
  annotations: JSON.parse(r.annotations) as Fn['annotations'],
  shape: r.shape === '' ? undefined : (r.shape as AppShape),
  created_at: r.created_at,
  updated_at: r.updated_at,
});

const triggerRow = (t: Trigger): TriggersTable => ({
  id: t.id,
  name: t.name,
  app_id: t.app_id,
  fn_id: t.fn_id,
  type: t.type,
  source: t.source,
  annotations: JSON.stringify(t.annotations),
  created_at: t.created_at,
  updated_at: t.updated_at,
});

const toTrigger = (r: Selectable<TriggersTable>): Trigger => ({
  id: r.id,
  name: r.name,
  app_id: r.app_id,
  fn_id: r.fn_id,
  type: r.type as TriggerType,
  source: r.source,
  annotations: JSON.parse(r.annotations) as Trigger['annotations'],
  created_at: r.created_at,
  updated_at: r.updated_at,
});

export interface SqlDatastoreOptions {
  /** Which database (its `kind`) and where (its `shown` form for messages: no password). */
  location: DbLocation;
  /** Recognises a unique-constraint violation of this database driver. */
  isUniqueViolation(err: unknown): boolean;
  /** Recognises this driver's "database or disk is full" (a write that failed for want of room). */
  isStorageFull(err: unknown): boolean;
  /** Recognises a write refused because another writer held the database's lock past the busy timeout (SQLite). */
  isBusy?(err: unknown): boolean;
  /** The database's folder on disk; undefined when it lives in memory. */
  folder: string | undefined;
  /** Releases the driver's own resources after Kysely is destroyed. */
  onClose?: () => Promise<void> | void;
  /** A SQLite database's writer thread (sqlite-thread.ts), started once the schema is migrated. */
  sqliteThread?: () => SqliteThread;
  /** The database's batch writes of call records, made once the schema is migrated; `db` throws once the store is closed. */
  batchWriter: (db: () => Kysely<Schema>, thread: SqliteThread | undefined) => BatchWriter;
  /** MySQL: statements sent several to a round trip (statement-batches.ts), for the embedded queue; made when first asked for. */
  statementBatches?: () => StatementBatches;
}

export class SqlDatastore implements Datastore {
  private closed = false;
  /** Call records and logs, in the same database. */
  readonly calls: SqlCallStore;
  /** API tokens (their digests), in the same database. */
  readonly tokens: SqlTokenStore;
  /** The keep-alive policy's histograms, in the same database. */
  readonly keepAlive: SqlKeepAliveStore;
  /** Whether the database's disk has room (storage.ts): every write goes through it. */
  readonly disk: DiskWatch;
  /** A SQLite database's writer thread: its frequent writes (records, the embedded queue) go there. */
  readonly thread: SqliteThread | undefined;
  private batches: StatementBatches | undefined;

  private constructor(
    private readonly db: Kysely<Schema>,
    private readonly options: SqlDatastoreOptions,
  ) {
    this.disk = new DiskWatch(options.folder, options.isStorageFull);
    this.thread = options.sqliteThread?.();
    this.calls = new SqlCallStore(
      () => this.q,
      options.batchWriter(() => this.q, this.thread),
      this.disk,
    );
    this.tokens = new SqlTokenStore(() => this.q, this.disk);
    this.keepAlive = new SqlKeepAliveStore(() => this.q, this.disk);
  }

  /**
   * Opens the store on `db` and brings its schema up to date: Kysely's
   * Migrator runs each migration once, under the database's lock (Postgres:
   * an advisory lock; MySQL: GET_LOCK; SQLite: its own write lock), so any
   * number of nodes started at once on an empty database all come up. A
   * database whose schema is newer than this fnts knows is refused.
   */
  static async open(db: Kysely<Schema>, options: SqlDatastoreOptions): Promise<SqlDatastore> {
    try {
      await SqlDatastore.refuseNewer(db, options.location);
      const migrator = new Migrator({
        db,
        provider: { getMigrations: async () => migrations },
        migrationTableName: MIGRATION_TABLE,
        migrationLockTableName: 'fnts_migrations_lock',
      });
      const { error } = await migrator.migrateToLatest();
      if (error) {
        // Another node may have migrated further meanwhile: say so rather than Kysely's words.
        await SqlDatastore.refuseNewer(db, options.location);
        throw new Error(`database migration failed on ${options.location.shown}: ${error instanceof Error ? error.message : String(error)}`, { cause: error });
      }
    } catch (err) {
      await db.destroy();
      throw err;
    }
    return new SqlDatastore(db, options);
  }

  /** Throws SchemaTooNewError when the database holds migrations this fnts does not know. */
  private static async refuseNewer(db: Kysely<Schema>, location: DbLocation): Promise<void> {
    const tables = await db.introspection.getTables({ withInternalKyselyTables: true });
    if (!tables.some((t) => t.name === MIGRATION_TABLE)) return;
    const rows = await sql<{ name: string }>`select name from ${sql.table(MIGRATION_TABLE)}`.execute(db);
    const unknown = rows.rows.map((r) => r.name).filter((name) => !(name in migrations));
    if (unknown.length > 0) throw new SchemaTooNewError(location.shown, unknown.sort());
  }

  /** Which database this is: sqlite, postgres or mysql. */
  get kind(): SqlKind {
    return this.options.location.kind;
  }

  /** Where the database is (its password included: never log it; `shown` is for messages). */
  get location(): DbLocation {
    return this.options.location;
  }

  /** Where the database is, for messages (no password). */
  get shown(): string {
    return this.options.location.shown;
  }

  /** The database itself, for the embedded queue that shares it (mq/sql.ts). Throws once closed. */
  database(): Kysely<Schema> {
    return this.q;
  }

  /** MySQL: statements sent several to a round trip, for the embedded queue (mq/sql.ts); undefined on other databases. Throws once closed. */
  statementBatches(): StatementBatches | undefined {
    if (this.closed) throw new DatastoreClosedError();
    return this.options.statementBatches ? (this.batches ??= this.options.statementBatches()) : undefined;
  }

  /**
   * Resolves once the database answers a trivial query: what a readiness
   * probe asks. Throws DatastoreClosedError once closed, otherwise an error
   * saying why the database does not answer.
   */
  async ping(): Promise<void> {
    const db = this.q;
    try {
      await sql`select 1`.execute(db);
    } catch (err) {
      throw new Error(`the database does not answer: ${err instanceof Error ? err.message : String(err)}`, { cause: err });
    }
  }

  private get q(): Kysely<Schema> {
    if (this.closed) throw new DatastoreClosedError();
    return this.db;
  }

  /**
   * Runs a change: a full disk answers StorageFullError (503), a lock held
   * too long by another writer DatabaseBusyError (503), a name or source
   * that is taken `conflict` (when given); other errors as they are.
   */
  private async write<T>(op: () => Promise<T>, conflict?: ErrorDef): Promise<T> {
    try {
      return await this.disk.write(op);
    } catch (err) {
      if (conflict && this.options.isUniqueViolation(err)) throw new ApiError(conflict, { cause: err });
      if (this.options.isBusy?.(err)) throw new DatabaseBusyError(err);
      throw err;
    }
  }

  // ---- apps

  async insertApp(app: App): Promise<App> {
    await this.write(() => this.q.insertInto('apps').values(appRow(app)).execute(), E.AppsAlreadyExists);
    return app;
  }

  private async appById(db: Db, id: string): Promise<App> {
    const row = await db.selectFrom('apps').selectAll().where('id', '=', id).executeTakeFirst();
    if (!row) throw new ApiError(E.AppsNotFound);
    return toApp(row);
  }

  async getAppById(id: string): Promise<App> {
    return this.appById(this.q, id);
  }

  async getAppByName(name: string): Promise<App> {
    const row = await this.q.selectFrom('apps').selectAll().where('name', '=', name).executeTakeFirst();
    if (!row) throw new ApiError(E.AppsNotFound);
    return toApp(row);
  }

  async listApps(filter: AppFilter): Promise<Page<App>> {
    let query = this.q.selectFrom('apps').selectAll();
    if (filter.name) query = query.where('name', '=', filter.name);
    if (filter.cursor) {
      const [name = ''] = decodeCursor('apps', filter.cursor);
      query = query.where('name', '>', name);
    }
    const rows = await query.orderBy('name').limit(limitOf(filter)).execute();
    return toPage(rows, limitOf(filter) - 1, toApp, 'apps', (r) => [r.name]);
  }

  async updateApp(id: string, update: (current: App) => App): Promise<App> {
    return this.write(() =>
      this.q.transaction().execute(async (trx) => {
        const current = await this.appById(trx, id);
        const next = update(current);
        if (next === current) return current;
        const { id: _id, name: _name, created_at: _c, ...changes } = appRow(next);
        await trx.updateTable('apps').set(changes).where('id', '=', id).execute();
        return next;
      }),
    );
  }

  async removeApp(id: string): Promise<void> {
    await this.write(() =>
      this.q.transaction().execute(async (trx) => {
        // Explicit rather than relying on ON DELETE CASCADE alone: SQLite only
        // cascades with foreign_keys enabled, and this must hold everywhere.
        await trx.deleteFrom('secrets').where('app_id', '=', id).execute();
        await trx.deleteFrom('triggers').where('app_id', '=', id).execute();
        await trx.deleteFrom('fns').where('app_id', '=', id).execute();
        const res = await trx.deleteFrom('apps').where('id', '=', id).executeTakeFirst();
        if (Number(res.numDeletedRows) === 0) throw new ApiError(E.AppsNotFound);
      }),
    );
  }

  // ---- fns

  async insertFn(fn: Fn): Promise<Fn> {
    return this.write(
      () =>
        this.q.transaction().execute(async (trx) => {
          const app = await this.appById(trx, fn.app_id);
          const stored: Fn = { ...fn, shape: app.shape };
          await trx.insertInto('fns').values(fnRow(stored)).execute();
          return stored;
        }),
      E.FnsExists,
    );
  }

  private async fnById(db: Db, id: string): Promise<Fn> {
    const row = await db.selectFrom('fns').selectAll().where('id', '=', id).executeTakeFirst();
    if (!row) throw new ApiError(E.FnsNotFound);
    return toFn(row);
  }

  async getFnById(id: string): Promise<Fn> {
    return this.fnById(this.q, id);
  }

  async listFns(filter: FnFilter): Promise<Page<Fn>> {
    let query = this.q.selectFrom('fns').selectAll().where('app_id', '=', filter.appId);
    if (filter.name) query = query.where('name', '=', filter.name);
    if (filter.cursor) {
      const [name = ''] = decodeCursor('fns', filter.cursor);
      query = query.where('name', '>', name);
    }
    const rows = await query.orderBy('name').limit(limitOf(filter)).execute();
    return toPage(rows, limitOf(filter) - 1, toFn, 'fns', (r) => [r.name]);
  }

  async updateFn(id: string, update: (current: Fn) => Fn): Promise<Fn> {
    return this.write(() =>
      this.q.transaction().execute(async (trx) => {
        const current = await this.fnById(trx, id);
        const next = update(current);
        if (next === current) return current;
        const { id: _id, name: _name, app_id: _app, created_at: _c, ...changes } = fnRow(next);
        await trx.updateTable('fns').set(changes).where('id', '=', id).execute();
        return next;
      }),
    );
  }

  async removeFn(id: string): Promise<void> {
    await this.write(() =>
      this.q.transaction().execute(async (trx) => {
        await trx.deleteFrom('secrets').where('fn_id', '=', id).execute();
        await trx.deleteFrom('triggers').where('fn_id', '=', id).execute();
        const res = await trx.deleteFrom('fns').where('id', '=', id).executeTakeFirst();
        if (Number(res.numDeletedRows) === 0) throw new ApiError(E.FnsNotFound);
      }),
    );
  }

  // ---- triggers

  /** The checks a trigger must pass before it is written, inside the writing transaction. */
  private async checkTrigger(trx: Db, t: Trigger): Promise<void> {
    await this.appById(trx, t.app_id);
    const fn = await this.fnById(trx, t.fn_id);
    if (fn.app_id !== t.app_id) throw new ApiError(E.TriggerFnIDNotSameApp);
    const clash = await trx.selectFrom('triggers').select('id').where('app_id', '=', t.app_id).where('type', '=', t.type).where('source', '=', t.source).where('id', '!=', t.id).executeTakeFirst();
    if (clash) throw new ApiError(E.TriggerSourceExists);
  }

  async insertTrigger(trigger: Trigger): Promise<Trigger> {
    return this.write(
      () =>
        this.q.transaction().execute(async (trx) => {
          await this.checkTrigger(trx, trigger);
          await trx.insertInto('triggers').values(triggerRow(trigger)).execute();
          return trigger;
        }),
      E.TriggerExists,
    );
  }

  private async triggerById(db: Db, id: string): Promise<Trigger> {
    const row = await db.selectFrom('triggers').selectAll().where('id', '=', id).executeTakeFirst();
    if (!row) throw new ApiError(E.TriggerNotFound);
    return toTrigger(row);
  }

  async getTriggerById(id: string): Promise<Trigger> {
    return this.triggerById(this.q, id);
  }

  async getTriggerBySource(appId: string, type: string, source: string): Promise<Trigger> {
    const row = await this.q.selectFrom('triggers').selectAll().where('app_id', '=', appId).where('type', '=', type).where('source', '=', source).executeTakeFirst();
    if (!row) throw new ApiError(E.TriggerNotFound);
    return toTrigger(row);
  }

  async listTriggers(filter: TriggerFilter): Promise<Page<Trigger>> {
    let query = this.q.selectFrom('triggers').selectAll().where('app_id', '=', filter.appId);
    if (filter.fnId) query = query.where('fn_id', '=', filter.fnId);
    if (filter.name) query = query.where('name', '=', filter.name);
    if (filter.cursor) {
      // Trigger names are unique per fn only, so the cursor carries the id too.
      const [name = '', id = ''] = decodeCursor('triggers', filter.cursor);
      query = query.where((eb) => eb.or([eb('name', '>', name), eb.and([eb('name', '=', name), eb('id', '>', id)])]));
    }
    const rows = await query.orderBy('name').orderBy('id').limit(limitOf(filter)).execute();
    return toPage(rows, limitOf(filter) - 1, toTrigger, 'triggers', (r) => [r.name, r.id]);
  }

  async updateTrigger(id: string, update: (current: Trigger) => Trigger): Promise<Trigger> {
    return this.write(
      () =>
        this.q.transaction().execute(async (trx) => {
          const current = await this.triggerById(trx, id);
          const next = update(current);
          if (next === current) return current;
          await this.checkTrigger(trx, next);
          const { id: _id, app_id: _app, type: _type, created_at: _c, ...changes } = triggerRow(next);
          await trx.updateTable('triggers').set(changes).where('id', '=', id).execute();
          return next;
        }),
      E.TriggerExists,
    );
  }

  async removeTrigger(id: string): Promise<void> {
    const res = await this.write(() => this.q.deleteFrom('triggers').where('id', '=', id).executeTakeFirst());
    if (Number(res.numDeletedRows) === 0) throw new ApiError(E.TriggerNotFound);
  }

  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    await this.calls.close();
    await this.thread?.close();
    await this.batches?.close();
    await this.db.destroy();
    await this.options.onClose?.();
  }
}
