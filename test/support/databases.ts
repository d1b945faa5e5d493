/**
 * A database for the tests of each kind fnts runs on, behind one shape:
 * a SQLite folder, or a real Postgres or MariaDB server (Debian's
 * packages; .ci/run installs them) started on a free port in a folder of
 * its own (test/support/postgres.ts, mysql.ts). `newDatabase()` makes an
 * empty database and answers its FN_DB_URL, in the form Fn users write.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { TestDbServer } from './db-server.js';
import { startMysql } from './mysql.js';
import { startPostgres } from './postgres.js';

export const DATABASE_KINDS = ['sqlite', 'postgres', 'mysql'] as const;
export type DatabaseKind = (typeof DATABASE_KINDS)[number];

/** A database server of the tests (or a SQLite folder: no server to kill or start). */
export interface TestDatabase extends Omit<TestDbServer, 'port'> {
  readonly kind: DatabaseKind;
}

export async function startDatabase(kind: DatabaseKind): Promise<TestDatabase> {
  if (kind === 'postgres') return { kind, ...(await startPostgres()) };
  if (kind === 'mysql') return { kind, ...(await startMysql()) };
  const dir = mkdtempSync(join(tmpdir(), 'fnts-sqlite-'));
  let n = 0;
  const noServer = async (): Promise<void> => {
    throw new Error('a SQLite database has no server to kill or start');
  };
  return {
    kind,
    newDatabase: async () => `sqlite3://${join(dir, `db-${n++}`, 'fn.db')}`,
    kill: noServer,
    start: noServer,
    async stop() {
      rmSync(dir, { recursive: true, force: true });
    },
  };
}
