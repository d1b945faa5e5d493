// What test/db/changes.test.ts takes from src/, and the Postgres client settings of a store's database.
import { postgresPoolConfig } from '../../src/datastore/sql/servers.js';
import type { SqlDatastore } from '../../src/datastore/index.js';

export { linkChanges, openSqlDatastore } from '../../src/datastore/index.js';
export type { ChangeLink, SqlDatastore } from '../../src/datastore/index.js';

export function parseDbUrlForTest(store: SqlDatastore): ReturnType<typeof postgresPoolConfig> {
  const loc = store.location;
  if (loc.kind !== 'postgres') throw new Error('not a Postgres store');
  return postgresPoolConfig(loc, 1);
}
