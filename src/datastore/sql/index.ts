export { openSqlDatastore, openSqlite, sqlitePath, UnsupportedDatabaseError } from './dialects.js';
export { SqlSecretStore } from './secrets.js';
export { DatastoreClosedError, SqlDatastore } from './store.js';
export type { Schema } from './schema.js';
