/**
 * A real Redis server for the tests, started from Debian's redis-server
 * binary (.ci/run installs it) on a free port, with nothing persisted.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { createServer, connect } from 'node:net';

export interface TestRedis {
  readonly url: string;
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

export async function startRedis(): Promise<TestRedis> {
  const port = await freePort();
  let proc: ChildProcess;
  try {
    proc = spawn('redis-server', ['--port', String(port), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no'], { stdio: 'ignore' });
  } catch (err) {
    throw new Error(`redis-server could not be started (install Debian's redis-server; .ci/run does): ${String(err)}`);
  }
  const failed = new Promise<never>((_r, reject) => proc.once('error', (err) => reject(new Error(`redis-server could not be started (install Debian's redis-server; .ci/run does): ${err.message}`))));
  const deadline = Date.now() + 10_000;
  for (;;) {
    const ok = await Promise.race([answers(port), failed]);
    if (ok) break;
    if (Date.now() > deadline) throw new Error('redis-server did not answer within 10 s');
    await new Promise((r) => setTimeout(r, 50));
  }
  return {
    url: `redis://127.0.0.1:${port}/0`,
    // Idempotent: a second stop finds the server gone.
    stop: () =>
      new Promise<void>((resolve) => {
        if (proc.exitCode !== null || proc.signalCode !== null) return resolve();
        proc.once('exit', () => resolve());
        proc.kill('SIGTERM');
      }),
  };
}
