/**
 * A real Postgres server for the tests, from Debian's `postgresql` package
 * (.ci/run installs it): a cluster made by initdb in a folder of its own,
 * run by `postgres` on a free port of 127.0.0.1, trusting local
 * connections, with fsync off (a test's data need not survive the
 * machine; it does survive the server's crash, which the tests cause). Its databases' default collation is not "C" where the machine
 * has a UTF-8 locale, so the tests see what a stock server does to ordering.
 */
import type { ChildProcess } from 'node:child_process';
import { join } from 'node:path';
import pg from 'pg';
import { freePort, managedServer, postgresProgram, runAs, serverFolder, spawnServer, systemUser, waitUntilServing, type TestDbServer } from './db-server.js';

async function answers(port: number): Promise<boolean> {
  const client = new pg.Client({ host: '127.0.0.1', port, user: 'postgres', database: 'postgres', connectionTimeoutMillis: 1000 });
  client.on('error', () => undefined);
  try {
    await client.connect();
    await client.query('select 1');
    return true;
  } finally {
    await client.end().catch(() => undefined);
  }
}

export async function startPostgres(): Promise<TestDbServer> {
  const initdb = postgresProgram('initdb');
  const postgres = postgresProgram('postgres');
  if (!initdb || !postgres) throw new Error("Postgres is not installed (no /usr/lib/postgresql/<version>/bin): install Debian's postgresql (.ci/run does)");
  const owner = systemUser('postgres');
  const dir = serverFolder('fnts-pg-', owner);
  const data = join(dir, 'data');
  runAs(owner, initdb, ['-D', data, '--auth=trust', '--username=postgres', '--encoding=UTF8', '--no-sync']);
  const port = await freePort();
  const launch = async (): Promise<ChildProcess> => {
    const args = ['-D', data, '-p', String(port), '-k', dir, '-h', '127.0.0.1', '-c', 'fsync=off', '-c', 'max_connections=300'];
    const server = spawnServer(owner, postgres, args);
    await waitUntilServing('postgres', server.proc, () => answers(port), server.output);
    return server.proc;
  };
  return managedServer(port, dir, launch, async (name) => {
    const client = new pg.Client({ host: '127.0.0.1', port, user: 'postgres', database: 'postgres' });
    await client.connect();
    try {
      await client.query(`create database ${name}`);
    } finally {
      await client.end();
    }
    return `postgres://postgres:not-checked@127.0.0.1:${port}/${name}?sslmode=disable`;
  });
}
