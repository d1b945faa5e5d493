/**
 * A real MariaDB server for the tests, from Debian's `mariadb-server`
 * package (.ci/run installs it): a data folder made by mariadb-install-db,
 * run by `mysql` on a free port of 127.0.0.1, with a user `fnts` (password
 * checked) reaching it over TCP, as a deployed fnts does. Log flushes are
 * relaxed (a test's data need not survive the machine).
 */
import type { ChildProcess } from 'node:child_process';
import { join } from 'node:path';
import { createConnection } from 'mysql2/promise';
import { freePort, managedServer, runAs, serverFolder, spawnServer, systemUser, waitUntilServing, type TestDbServer } from './db-server.js';

const USER = 'mysql';
const PASSWORD = 'fnts-test';

export async function startMysql(): Promise<TestDbServer> {
  const owner = systemUser(USER);
  const dir = serverFolder('fnts-mysql-', owner);
  const data = join(dir, 'data');
  const socket = join(dir, 'mysqld.sock');
  try {
    runAs(undefined, 'mariadb-install-db', ['--no-defaults', `--datadir=${data}`, ...(owner ? [`--user=${USER}`] : []), '--auth-root-authentication-method=socket', '--skip-test-db']);
  } catch (err) {
    throw new Error(`MariaDB could not be set up (install Debian's mariadb-server; .ci/run does): ${(err as Error).message}`);
  }
  const port = await freePort();
  const root = () => createConnection({ socketPath: socket, user: 'root' });
  const launch = async (): Promise<ChildProcess> => {
    const args = [
      '--no-defaults',
      `--datadir=${data}`,
      `--port=${port}`,
      '--bind-address=127.0.0.1',
      `--socket=${socket}`,
      // Its own folder for temporary tables, not /tmp: a MariaDB server starting removes every #sql* file in
      // its tmpdir, and so failed the statements of another test's server running beside it.
      `--tmpdir=${dir}`,
      '--innodb-flush-log-at-trx-commit=2',
      '--innodb-buffer-pool-size=64M',
      '--skip-log-bin',
      '--max-connections=300',
      '--skip-name-resolve',
    ];
    // Run as mysql from the start (not --user, which changes user later and so loses setpriv's death signal).
    const server = spawnServer(owner, 'mariadbd', args);
    await waitUntilServing(
      'mariadbd',
      server.proc,
      async () => {
        const c = await root();
        await c.end();
        return true;
      },
      server.output,
    );
    return server.proc;
  };
  const started = await managedServer(port, dir, launch, async (name) => {
    const conn = await root();
    try {
      await conn.query(`CREATE DATABASE ${name}`);
    } finally {
      await conn.end();
    }
    return `mysql://fnts:${PASSWORD}@tcp(127.0.0.1:${port})/${name}`;
  });
  const c = await root();
  await c.query(`CREATE USER IF NOT EXISTS 'fnts'@'127.0.0.1' IDENTIFIED BY '${PASSWORD}'`);
  await c.query(`GRANT ALL ON *.* TO 'fnts'@'127.0.0.1'`);
  await c.end();
  return started;
}
