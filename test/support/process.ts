/**
 * Starts the real `fnts` binary (dist/cli/main.js) as a child process, the
 * way a user runs it, and finds the port it listens on from its log.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { TEST_AUTH_ENV } from './auth.js';
import { testRunTag } from './tag.js';

const MAIN = join(dirname(fileURLToPath(import.meta.url)), '..', '..', 'dist', 'cli', 'main.js');

export interface FntsProcess {
  readonly proc: ChildProcess;
  readonly port: number;
  readonly url: string;
  /** Everything the process wrote so far. */
  output(): string;
  /**
   * Sends `signal` and resolves with the exit code. Throws when the server
   * logged an unhandled rejection or uncaught exception: a bug that would
   * have ended (or been about to end) a user's server.
   */
  stop(signal?: NodeJS.Signals): Promise<number | null>;
}

/** Every fnts process a test started and that has not exited yet. */
const live = new Set<ChildProcess>();

/**
 * Stops whatever fnts processes are still running (a test that failed before
 * it stopped its server): SIGTERM, then SIGKILL after `graceMs`. Runs after
 * every test file (test/setup/children.ts), so no server outlives its test.
 */
export async function stopLeftoverServers(graceMs = 15_000): Promise<number> {
  const left = [...live];
  await Promise.all(
    left.map(
      (proc) =>
        new Promise<void>((resolve) => {
          const kill = setTimeout(() => proc.kill('SIGKILL'), graceMs);
          proc.once('exit', () => {
            clearTimeout(kill);
            resolve();
          });
          proc.kill('SIGTERM');
        }),
    ),
  );
  return left.length;
}

/** Runs `fnts <args>`: the process, what it has printed so far, and its end (its code and all it printed). */
export function runFnts(args: string[], env: Record<string, string>, cwd?: string): { proc: ChildProcess; output: () => string; done: Promise<{ code: number | null; output: string }> } {
  const proc = spawn(process.execPath, [MAIN, ...args], {
    cwd,
    env: { PATH: process.env['PATH'] ?? '', ...TEST_AUTH_ENV, ...testRunTag(), ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  live.add(proc);
  proc.once('exit', () => live.delete(proc));
  let output = '';
  proc.stdout!.on('data', (b: Buffer) => (output += b.toString()));
  proc.stderr!.on('data', (b: Buffer) => (output += b.toString()));
  // 'exit' may come before the last of the output has been read: done waits for both pipes to end too
  // (for 2 s at most: a process the server started might hold them open).
  const ended = (stream: NodeJS.ReadableStream): Promise<void> => new Promise((resolve) => stream.once('close', resolve));
  const drained = Promise.all([ended(proc.stdout!), ended(proc.stderr!)]);
  const done = new Promise<number | null>((resolve) => proc.once('exit', (code) => resolve(code))).then(async (code) => {
    await Promise.race([drained, new Promise((r) => setTimeout(r, 2000).unref())]);
    return { code, output };
  });
  return { proc, output: () => output, done };
}

export async function startFnts(env: Record<string, string>, options: { cwd?: string; timeoutMs?: number } = {}): Promise<FntsProcess> {
  const timeoutMs = options.timeoutMs ?? 20_000;
  const { proc, output, done } = runFnts(['serve'], { FN_PORT: '0', FN_LISTEN_HOST: '127.0.0.1', FNTS_GRPC_LISTEN_HOST: '127.0.0.1', ...env }, options.cwd);
  const port = await new Promise<number>((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`fnts did not start within ${timeoutMs}ms:\n${output()}`)), timeoutMs);
    const onData = (): void => {
      const m = /fnts serving on :(\d+)/.exec(output());
      if (m) {
        clearTimeout(timer);
        proc.stdout!.off('data', onData);
        resolve(Number(m[1]));
      }
    };
    proc.stdout!.on('data', onData);
    void done.then(({ code }) => {
      clearTimeout(timer);
      reject(new Error(`fnts exited with ${code} before listening:\n${output()}`));
    });
  });
  return {
    proc,
    port,
    url: `http://127.0.0.1:${port}`,
    output,
    async stop(signal = 'SIGTERM') {
      if (proc.exitCode === null && proc.signalCode === null) proc.kill(signal);
      const { code } = await done;
      const fault = /unhandled rejection|uncaught exception|UnhandledPromiseRejection/i.exec(output());
      if (fault) throw new Error(`fnts logged a fault that would end a server:\n${output()}`);
      return code;
    },
  };
}
