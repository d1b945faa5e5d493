/**
 * Opens a SqlDatastore from an Fn-style FN_DB_URL (config/db-url.ts):
 *   sqlite3:///abs/path/fn.db   sqlite3://relative/fn.db   sqlite3://:memory:
 *   postgres://user:pass@host:5432/db?sslmode=disable   (servers.ts)
 *   mysql://user:pass@tcp(host:3306)/db                 (servers.ts)
 */
import { mkdirSync } from 'node:fs';
import { dirname } from 'node:path';
import BetterSqlite3 from 'better-sqlite3';
import { setTimeout as sleep } from 'node:timers/promises';
import { Kysely, sql, SqliteAdapter, SqliteDialect, SqliteDriver, CompiledQuery, type DatabaseConnection, type DialectAdapter, type Driver, type QueryResult } from 'kysely';
import { DbUrlError, parseDbUrl, type DbLocation } from '../../config/index.js';
import { openMysql, openPostgres, type ServerOptions } from './servers.js';
import { inPlaceThread, workerThread, type SqliteThread } from './sqlite-thread.js';
import { threadWriter } from './sqlite-writer.js';
import { SqlDatastore, type Schema } from './store.js';

export class UnsupportedDatabaseError extends Error {
  override readonly name = 'UnsupportedDatabaseError';
}

/** The file path of a `sqlite3://` URL, or ':memory:' (config/db-url.ts parses it). */
export function sqlitePath(url: string, cwd: string = process.cwd()): string {
  const loc = parseDbUrl(url.replace(/^sqlite:/i, 'sqlite3:'), cwd);
  if (loc.kind !== 'sqlite') throw new UnsupportedDatabaseError(`${loc.shown} is not a sqlite3:// URL`);
  return loc.path;
}

function isSqliteUniqueViolation(err: unknown): boolean {
  const code = (err as { code?: unknown } | null)?.code;
  return code === 'SQLITE_CONSTRAINT_UNIQUE' || code === 'SQLITE_CONSTRAINT_PRIMARYKEY';
}

/** SQLite's "database or disk is full" (its VFS answers ENOSPC so), from the server's connection or the record writer's. */
function isSqliteFull(err: unknown): boolean {
  return (err as { code?: unknown } | null)?.code === 'SQLITE_FULL';
}

/**
 * SQLite's adapter, with a migration lock: Kysely's takes none (it counts on
 * one connection), but several processes may open one file at the same
 * moment. The migrations run inside BEGIN IMMEDIATE, which takes the file's
 * write lock before reading which migrations are applied: the others wait
 * (busy_timeout), then find them applied.
 */
class MigrationLockingSqliteAdapter extends SqliteAdapter {
  override async acquireMigrationLock(db: Kysely<unknown>): Promise<void> {
    await sql`begin immediate`.execute(db);
  }

  override async releaseMigrationLock(db: Kysely<unknown>): Promise<void> {
    await sql`commit`.execute(db);
  }
}

function isSqliteBusy(err: unknown): boolean {
  return String((err as { code?: unknown } | null)?.code ?? '').startsWith('SQLITE_BUSY');
}

/** How long one attempt of the server's connection may sleep on the file's lock (the event loop stops meanwhile). */
const BUSY_SLICE_MS = 10;

/**
 * Kysely's SQLite driver, made patient without stopping the event loop.
 * better-sqlite3 is synchronous: a statement that meets the writer thread's
 * lock sleeps in SQLite's busy handler, and every request of the node waits
 * with it. Here a statement sleeps at most BUSY_SLICE_MS, and when the lock
 * is still held it is tried again after a timer (2, 4, ... 50 ms), until
 * `patienceMs` have passed: then SQLITE_BUSY (the datastore answers 503).
 * Only what may be tried again is: a statement outside a transaction (it
 * did nothing), and the BEGIN of one, which is IMMEDIATE (it takes the
 * write lock first, so nothing inside it waits for the lock).
 */
class PatientSqliteDriver implements Driver {
  private inTransaction = false;

  constructor(
    private readonly inner: SqliteDriver,
    private readonly patienceMs: number,
  ) {}

  init(): Promise<void> {
    return this.inner.init();
  }

  async acquireConnection(): Promise<DatabaseConnection> {
    const connection = await this.inner.acquireConnection();
    return {
      executeQuery: <R>(query: CompiledQuery): Promise<QueryResult<R>> => (this.inTransaction ? connection.executeQuery<R>(query) : this.patiently(() => connection.executeQuery<R>(query))),
      streamQuery: <R>(query: CompiledQuery, chunkSize?: number): AsyncIterableIterator<QueryResult<R>> => connection.streamQuery<R>(query, chunkSize),
    };
  }

  async beginTransaction(connection: DatabaseConnection): Promise<void> {
    await connection.executeQuery(CompiledQuery.raw('begin immediate'));
    this.inTransaction = true;
  }

  async commitTransaction(connection: DatabaseConnection): Promise<void> {
    try {
      await connection.executeQuery(CompiledQuery.raw('commit'));
    } finally {
      this.inTransaction = false;
    }
  }

  async rollbackTransaction(connection: DatabaseConnection): Promise<void> {
    try {
      await connection.executeQuery(CompiledQuery.raw('rollback'));
    } finally {
      this.inTransaction = false;
    }
  }

  releaseConnection(): Promise<void> {
    return this.inner.releaseConnection();
  }

  destroy(): Promise<void> {
    return this.inner.destroy();
  }

  private async patiently<T>(run: () => Promise<T>): Promise<T> {
    const deadline = performance.now() + this.patienceMs;
    for (let wait = 2; ; wait = Math.min(wait * 2, 50)) {
      try {
        return await run();
      } catch (err) {
        if (!isSqliteBusy(err) || performance.now() + wait > deadline) throw err;
        await sleep(wait);
      }
    }
  }
}

class SqliteFileDialect extends SqliteDialect {
  constructor(
    private readonly database: BetterSqlite3.Database,
    private readonly patienceMs: number,
  ) {
    super({ database });
  }

  override createAdapter(): DialectAdapter {
    return new MigrationLockingSqliteAdapter();
  }

  override createDriver(): Driver {
    return new PatientSqliteDriver(new SqliteDriver({ database: this.database }), this.patienceMs);
  }
}

/** `patienceMs`: how long a change waits for another writer's lock before it is refused (DatabaseBusyError, 503). */
export async function openSqlite(path: string, patienceMs = 5000): Promise<SqlDatastore> {
  if (path !== ':memory:') mkdirSync(dirname(path), { recursive: true });
  const database = new BetterSqlite3(path);
  // WAL keeps readers off the writer's back; NORMAL sync is durable across
  // process crashes (the WAL is fsynced at checkpoints); foreign keys make
  // the schema's cascades real.
  database.pragma('journal_mode = WAL');
  database.pragma('synchronous = NORMAL');
  database.pragma('foreign_keys = ON');
  database.pragma(`busy_timeout = ${Math.min(BUSY_SLICE_MS, Math.max(0, Math.floor(patienceMs)))}`);
  const db = new Kysely<Schema>({ dialect: new SqliteFileDialect(database, patienceMs) });
  // Started once the schema exists: records and queued calls of a file database are written by a thread of their own.
  let thread: SqliteThread | undefined;
  const writerThread = (): SqliteThread => (thread ??= path === ':memory:' ? inPlaceThread(database) : workerThread(path));
  return SqlDatastore.open(db, {
    location: { kind: 'sqlite', path, shown: `sqlite3://${path}` },
    isUniqueViolation: isSqliteUniqueViolation,
    isStorageFull: isSqliteFull,
    isBusy: isSqliteBusy,
    folder: path === ':memory:' ? undefined : dirname(path),
    sqliteThread: writerThread,
    batchWriter: () => threadWriter(writerThread()),
  });
}

/**
 * The datastore FN_DB_URL names (a URL or its parsed location), its schema
 * brought up to date under the database's lock. Throws UnsupportedDatabaseError
 * for a URL that names no database fnts can use (never showing its password).
 */
export async function openSqlDatastore(url: string | DbLocation, options: Partial<ServerOptions> = {}): Promise<SqlDatastore> {
  let loc: DbLocation;
  try {
    loc = typeof url === 'string' ? parseDbUrl(url) : url;
  } catch (err) {
    if (err instanceof DbUrlError) throw new UnsupportedDatabaseError(err.message, { cause: err });
    throw err;
  }
  const server: ServerOptions = { poolSize: options.poolSize ?? 10, onUnavailable: options.onUnavailable };
  switch (loc.kind) {
    case 'sqlite':
      return openSqlite(loc.path);
    case 'postgres':
      return openPostgres(loc, server);
    case 'mysql':
      return openMysql(loc, server);
  }
}
