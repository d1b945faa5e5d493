/**
 * The Fn Project's own server (../shared/bin/fnserver, see its README) as a
 * test peer: started in a role with Fn's variables, on ports of its own, in a
 * temporary directory, with a container tag of the test's own; stopped with
 * SIGTERM and waited for, and then its containers and directory removed.
 *
 * A user's fresh clone has no ../shared: tests check `FNSERVER` exists and
 * skip, saying why, when it does not.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { existsSync, mkdirSync, mkdtempSync, rmSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { RunnerClient } from '../../src/lb/index.js';
import { docker } from './images.js';
import { eventually } from './wait.js';

const root = join(dirname(fileURLToPath(import.meta.url)), '..', '..');

/** Fn's server binary, beside the repository (absent from a fresh clone). */
export const FNSERVER = join(root, '..', 'shared', 'bin', 'fnserver');

export function fnServerPresent(): boolean {
  return existsSync(FNSERVER);
}

/** The label Fn puts FN_CONTAINER_LABEL_TAG in on every container it starts. */
const FN_TAG_LABEL = 'fn-agent-classifier';

/** A container tag for one test file's Fn servers: what its cleanup removes, and nothing else. */
export function fnContainerTag(): string {
  return `fnts-interop-${process.pid}-${randomBytes(3).toString('hex')}`;
}

/** A port free on every interface right now (Fn listens on all of them). */
export function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const s = createServer();
    s.once('error', reject);
    s.listen(0, () => {
      const { port } = s.address() as { port: number };
      s.close(() => resolve(port));
    });
  });
}

export interface FnServer {
  readonly role: 'full' | 'api' | 'lb' | 'pure-runner';
  /** The server's process id (benchmarks read its CPU time). */
  readonly pid: number;
  readonly url: string;
  /** The RunnerProtocol address of a pure runner (127.0.0.1:FN_GRPC_PORT). */
  readonly grpcAddress: string | undefined;
  output(): string;
  /** SIGTERM, then waits for the exit (SIGKILL after `graceMs`); removes its directory. Idempotent. */
  stop(graceMs?: number): Promise<void>;
}

/**
 * Starts fnserver in `role` with `env` on top of its own ports, directory
 * (cwd, FN_DB_URL, FN_IOFS_PATH and FN_IOFS_DOCKER_PATH for a runner) and
 * `tag`; resolves once it answers (HTTP /version, or a runner's Status RPC).
 */
export async function startFnServer(role: FnServer['role'], tag: string, env: Record<string, string> = {}, timeoutMs = 20_000): Promise<FnServer> {
  const dir = mkdtempSync(join(tmpdir(), `fnts-fn-${role}-`));
  const port = await freePort();
  const grpcPort = role === 'pure-runner' ? await freePort() : undefined;
  const iofs = join(dir, 'iofs');
  mkdirSync(iofs);
  const proc: ChildProcess = spawn(FNSERVER, [], {
    cwd: dir,
    env: {
      PATH: process.env['PATH'] ?? '',
      HOME: dir,
      FN_NODE_TYPE: role,
      FN_PORT: String(port),
      FN_LOG_LEVEL: 'error',
      FN_CONTAINER_LABEL_TAG: tag,
      FN_DB_URL: `sqlite3://${join(dir, 'fn.db')}`,
      ...(grpcPort === undefined ? {} : { FN_GRPC_PORT: String(grpcPort), FN_IOFS_PATH: iofs, FN_IOFS_DOCKER_PATH: iofs }),
      ...env,
    },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let output = '';
  proc.stdout!.on('data', (b: Buffer) => (output += b.toString()));
  proc.stderr!.on('data', (b: Buffer) => (output += b.toString()));
  const exited = new Promise<void>((resolve) => proc.once('exit', () => resolve()));
  let stopped: Promise<void> | undefined;
  const stop = (graceMs = 10_000): Promise<void> =>
    (stopped ??= (async () => {
      if (proc.exitCode === null && proc.signalCode === null) {
        const kill = setTimeout(() => proc.kill('SIGKILL'), graceMs);
        proc.kill('SIGTERM');
        await exited;
        clearTimeout(kill);
      }
      rmSync(dir, { recursive: true, force: true });
    })());

  const url = `http://127.0.0.1:${port}`;
  const grpcAddress = grpcPort === undefined ? undefined : `127.0.0.1:${grpcPort}`;
  const probe = grpcAddress === undefined ? undefined : new RunnerClient(grpcAddress);
  const up = async (): Promise<boolean> => {
    if (proc.exitCode !== null) throw new Error(`fnserver ${role} exited with ${proc.exitCode}:\n${output}`);
    try {
      if (probe) await probe.status(500);
      else if (!(await fetch(`${url}/version`, { signal: AbortSignal.timeout(500) })).ok) return false;
      return true;
    } catch {
      return false;
    }
  };
  try {
    if (!(await eventually(up, timeoutMs, 50))) throw new Error(`fnserver ${role} did not answer within ${timeoutMs} ms:\n${output}`);
  } catch (err) {
    await stop();
    throw err;
  } finally {
    probe?.close();
  }
  return { role, pid: proc.pid!, url, grpcAddress, output: () => output, stop };
}

/** Removes every container Fn started with `tag` (after its servers stopped); answers how many there were. */
export async function removeFnContainers(tag: string): Promise<number> {
  const left = await docker().listContainers({ all: true, filters: { label: [`${FN_TAG_LABEL}=${tag}`] } });
  await Promise.all(
    left.map((c) =>
      docker()
        .getContainer(c.Id)
        .remove({ force: true })
        .catch(() => undefined),
    ),
  );
  return left.length;
}
