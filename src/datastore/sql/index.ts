export { openSqlDatastore, openSqlite, sqlitePath, UnsupportedDatabaseError } from './dialects.js';
export { SqlSecretStore } from './secrets.js';
export { DatastoreClosedError, SCHEMA_VERSION, SchemaTooNewError, SqlDatastore } from './store.js';
export { kindOf } from './kinds.js';
export type { SqlKind } from './kinds.js';
export type { Schema } from './schema.js';
export { linkChanges, POLL_MS } from './change-feed.js';
export type { ChangeLink } from './change-feed.js';
export type { ProgramSource, SqliteProgram, SqliteThread } from './sqlite-thread.js';
