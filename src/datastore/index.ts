/**
 * datastore/ — persistence of apps, fns and triggers behind the Datastore
 * interface, call records and logs behind the CallStore interface, secrets
 * behind the SecretStore interface (sealed by secret-box.ts under the key of
 * secret-key.ts); sql/ implements them on Kysely: SQLite embedded by default,
 * Postgres or MySQL (FN_DB_URL) for several nodes on one database.
 */
export type { AppFilter, Datastore, FnFilter, Page, PageRequest, TriggerFilter } from './datastore.js';
export type { CallFilter, CallLogEntry, CallStore } from './calls.js';
export type { SecretStore } from './secrets.js';
export { SecretBox, UnsealError } from './secret-box.js';
export { loadSecretKey, SECRET_KEY_FILE, SecretKeyError } from './secret-key.js';
export type { SecretKeySource } from './secret-key.js';
export type { TokenRecord, TokenStore } from './tokens.js';
export { decodeCursor, encodeCursor } from './cursor.js';
export { GroupCommit, type GroupCommitOptions } from './group-commit.js';
export { DATABASE_BUSY, DATABASE_DISK_FULL, DATABASE_UNAVAILABLE, DatabaseBusyError, DatabaseUnavailableError, DiskWatch, failsEveryWrite, StorageFullError } from './storage.js';
export type { CursorListing } from './cursor.js';
export { DatastoreClosedError, kindOf, openSqlDatastore, openSqlite, SCHEMA_VERSION, SchemaTooNewError, SqlDatastore, SqlSecretStore, UnsupportedDatabaseError } from './sql/index.js';
export type { ChangeLink, ProgramSource, Schema as SqlSchema, SqliteProgram, SqliteThread, SqlKind, Statement, StatementBatches, StatementResult } from './sql/index.js';
export { linkChanges, ownedArrayBuffer } from './sql/index.js';
