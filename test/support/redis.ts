/**
 * A real Redis server for the tests, started from Debian's redis-server
 * binary (.ci/run installs it) on a free port, in a folder of its own.
 * By default it keeps its data the way fnts requires of a Redis queue: an
 * append-only file fsynced every second. `volatile: true` starts it the way
 * many run it in development (`--save '' --appendonly no`): nothing kept.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { createServer, connect } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

export interface TestRedis {
  readonly url: string;
  /** Kills the server (SIGKILL: no last save) and starts it again on the same port and folder. */
  restart(): Promise<void>;
  /** Stops the server and removes its folder. Idempotent. */
  stop(): Promise<void>;
}

async function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const s = createServer();
    s.listen(0, '127.0.0.1', () => {
      const port = (s.address() as { port: number }).port;
      s.close(() => resolve(port));
    });
    s.on('error', reject);
  });
}

function answers(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const c = connect(port, '127.0.0.1');
    c.once('connect', () => {
      c.write('PING\r\n');
      c.once('data', (d) => {
        c.destroy();
        resolve(d.toString().startsWith('+PONG'));
      });
    });
    c.once('error', () => resolve(false));
  });
}

function exited(proc: ChildProcess): Promise<void> {
  return new Promise<void>((resolve) => {
    if (proc.exitCode !== null || proc.signalCode !== null) return resolve();
    proc.once('exit', () => resolve());
  });
}

async function launch(port: number, dir: string, volatile: boolean): Promise<ChildProcess> {
  const persistence = volatile ? ['--save', '', '--appendonly', 'no'] : ['--save', '', '--appendonly', 'yes', '--appendfsync', 'everysec'];
  let proc: ChildProcess;
  try {
    proc = spawn('redis-server', ['--port', String(port), '--bind', '127.0.0.1', '--dir', dir, ...persistence], { stdio: 'ignore' });
  } catch (err) {
    throw new Error(`redis-server could not be started (install Debian's redis-server; .ci/run does): ${String(err)}`);
  }
  const failed = new Promise<never>((_r, reject) => proc.once('error', (err) => reject(new Error(`redis-server could not be started (install Debian's redis-server; .ci/run does): ${err.message}`))));
  failed.catch(() => undefined);
  const deadline = Date.now() + 10_000;
  for (;;) {
    const ok = await Promise.race([answers(port), failed]);
    if (ok) return proc;
    if (Date.now() > deadline) {
      proc.kill('SIGKILL');
      throw new Error('redis-server did not answer within 10 s');
    }
    await new Promise((r) => setTimeout(r, 50));
  }
}

export async function startRedis(options: { volatile?: boolean } = {}): Promise<TestRedis> {
  const volatile = options.volatile ?? false;
  const port = await freePort();
  const dir = mkdtempSync(join(tmpdir(), 'fnts-redis-'));
  let proc = await launch(port, dir, volatile);
  return {
    url: `redis://127.0.0.1:${port}/0`,
    async restart() {
      proc.kill('SIGKILL');
      await exited(proc);
      proc = await launch(port, dir, volatile);
    },
    async stop() {
      proc.kill('SIGTERM');
      await exited(proc);
      rmSync(dir, { recursive: true, force: true });
    },
  };
}
