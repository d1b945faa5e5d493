/**
 * Opens a SqlDatastore from an Fn-style FN_DB_URL:
 *   sqlite3:///abs/path/fn.db   sqlite3://relative/fn.db   sqlite3://:memory:
 */
import { mkdirSync } from 'node:fs';
import { dirname, resolve } from 'node:path';
import BetterSqlite3 from 'better-sqlite3';
import { Kysely, SqliteDialect } from 'kysely';
import { inPlaceWriter, workerWriter } from './sqlite-writer.js';
import { SqlDatastore, type Schema } from './store.js';

export class UnsupportedDatabaseError extends Error {
  override readonly name = 'UnsupportedDatabaseError';
}

/** The file path of a `sqlite3://` URL, or ':memory:'. */
export function sqlitePath(url: string, cwd: string = process.cwd()): string {
  const rest = url.slice('sqlite3://'.length).replace(/[?#].*$/, '');
  if (rest === ':memory:' || rest === '') return ':memory:';
  return resolve(cwd, decodeURIComponent(rest));
}

function isSqliteUniqueViolation(err: unknown): boolean {
  const code = (err as { code?: unknown } | null)?.code;
  return code === 'SQLITE_CONSTRAINT_UNIQUE' || code === 'SQLITE_CONSTRAINT_PRIMARYKEY';
}

/** SQLite's "database or disk is full" (its VFS answers ENOSPC so), from the server's connection or the record writer's. */
function isSqliteFull(err: unknown): boolean {
  return (err as { code?: unknown } | null)?.code === 'SQLITE_FULL';
}

export async function openSqlite(path: string): Promise<SqlDatastore> {
  if (path !== ':memory:') mkdirSync(dirname(path), { recursive: true });
  const database = new BetterSqlite3(path);
  // WAL keeps readers off the writer's back; NORMAL sync is durable across
  // process crashes (the WAL is fsynced at checkpoints); foreign keys make
  // the schema's cascades real.
  database.pragma('journal_mode = WAL');
  database.pragma('synchronous = NORMAL');
  database.pragma('foreign_keys = ON');
  database.pragma('busy_timeout = 5000');
  const db = new Kysely<Schema>({ dialect: new SqliteDialect({ database }) });
  return SqlDatastore.open(db, {
    isUniqueViolation: isSqliteUniqueViolation,
    isStorageFull: isSqliteFull,
    folder: path === ':memory:' ? undefined : dirname(path),
    // Made once the schema exists: records of a file database are written by a thread of their own.
    batchWriter: () => (path === ':memory:' ? inPlaceWriter(database) : workerWriter(path)),
  });
}

export async function openSqlDatastore(url: string): Promise<SqlDatastore> {
  const scheme = url.split(':', 1)[0]?.toLowerCase();
  switch (scheme) {
    case 'sqlite3':
    case 'sqlite':
      return openSqlite(sqlitePath(url.replace(/^sqlite:/i, 'sqlite3:')));
    default:
      throw new UnsupportedDatabaseError(`FN_DB_URL scheme "${scheme}" is not supported; use sqlite3:///path/to/fn.db`);
  }
}
