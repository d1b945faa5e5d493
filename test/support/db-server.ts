/**
 * What the Postgres and MariaDB test servers share: a free port, a folder
 * owned by the server's system user, a child process that is killed with
 * the test worker, and waiting until the server answers.
 */
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { chownSync, mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { connect } from 'node:net';
import { tmpdir, userInfo } from 'node:os';
import { join } from 'node:path';
import { freePort } from './fnserver.js';

export { freePort };

/** Whether this process runs as root: the servers refuse to, so they run as their package's user. */
export const asRoot = userInfo().uid === 0;

/** The uid and gid of a system user, or undefined when there is none. */
export function systemUser(name: string): { uid: number; gid: number } | undefined {
  const r = spawnSync('id', ['-u', name], { encoding: 'utf8' });
  const g = spawnSync('id', ['-g', name], { encoding: 'utf8' });
  if (r.status !== 0 || g.status !== 0) return undefined;
  return { uid: Number(r.stdout.trim()), gid: Number(g.stdout.trim()) };
}

/** A temporary folder for a server's data, owned by `owner` when running as root. */
export function serverFolder(prefix: string, owner: { uid: number; gid: number } | undefined): string {
  const dir = mkdtempSync(join(tmpdir(), prefix));
  if (asRoot && owner) chownSync(dir, owner.uid, owner.gid);
  return dir;
}

/** The newest of `/usr/lib/postgresql/<version>/bin/<program>`, or undefined. */
export function postgresProgram(program: string): string | undefined {
  let versions: string[];
  try {
    versions = readdirSync('/usr/lib/postgresql').filter((v) => /^\d+$/.test(v));
  } catch {
    return undefined;
  }
  const newest = versions.sort((x, y) => Number(y) - Number(x))[0];
  return newest === undefined ? undefined : `/usr/lib/postgresql/${newest}/bin/${program}`;
}

/** Runs `command` as `user` when root (the servers will not run as root), else as this user; throws with its output when it fails. */
export function runAs(user: { uid: number; gid: number } | undefined, command: string, args: readonly string[]): void {
  const r = spawnSync(command, [...args], { encoding: 'utf8', ...(asRoot && user ? { uid: user.uid, gid: user.gid } : {}) });
  if (r.status !== 0) throw new Error(`${command} ${args.join(' ')} failed (${r.status ?? r.signal}): ${r.stdout}${r.stderr}${r.error ? String(r.error) : ''}`);
}

/** Starts a server process as `user` (when root: the process itself, so that killing it kills the server), its output kept for the error of a start that fails. */
export function spawnServer(user: { uid: number; gid: number } | undefined, command: string, args: readonly string[]): { proc: ChildProcess; output: () => string } {
  // setpriv asks the kernel to SIGKILL the server when the test worker dies, however it dies (no exit handler runs on a SIGKILL).
  const [cmd, argv] = setprivPresent ? ['setpriv', ['--pdeathsig', 'SIGKILL', '--', command, ...args]] : [command, [...args]];
  const proc = spawn(cmd, argv, { stdio: ['ignore', 'pipe', 'pipe'], ...(asRoot && user ? { uid: user.uid, gid: user.gid } : {}) });
  let output = '';
  proc.stdout!.on('data', (b: Buffer) => (output = (output + b.toString()).slice(-20_000)));
  proc.stderr!.on('data', (b: Buffer) => (output = (output + b.toString()).slice(-20_000)));
  proc.on('error', (err) => (output += `\n${String(err)}`));
  servers.add(proc);
  proc.once('exit', () => servers.delete(proc));
  return { proc, output: () => output };
}

/** Whether util-linux's setpriv is here (Debian has it). */
const setprivPresent = spawnSync('setpriv', ['--version']).status === 0;

/** Server processes still running: killed when the worker exits (and by the kernel when it is killed: setpriv). */
const servers = new Set<ChildProcess>();
process.once('exit', () => {
  for (const p of servers) killGroup(p);
});

/** Whether something accepts TCP connections on 127.0.0.1:`port`. */
function accepts(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const socket = connect({ host: '127.0.0.1', port }, () => {
      socket.destroy();
      resolve(true);
    });
    socket.on('error', () => resolve(false));
  });
}

/** The processes descended from `pid` (read from /proc: each process's parent). */
function descendants(pid: number): number[] {
  const children = new Map<number, number[]>();
  for (const entry of readdirSync('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    try {
      const ppid = Number(readFileSync(`/proc/${entry}/stat`, 'utf8').split(') ')[1]!.split(' ')[1]);
      children.set(ppid, [...(children.get(ppid) ?? []), Number(entry)]);
    } catch {
      // it ended meanwhile
    }
  }
  const out: number[] = [];
  for (let i = 0, next = [pid]; next.length > 0; i++) {
    next = next.flatMap((p) => children.get(p) ?? []);
    out.push(...next);
  }
  return out;
}

/**
 * SIGKILL to the server and every process it started: Postgres' backends
 * lead process groups of their own and go on serving their connections for
 * a moment after the postmaster alone dies, which is not the crash the
 * tests mean.
 */
export function killGroup(proc: ChildProcess): void {
  const all = proc.pid === undefined ? [] : [proc.pid, ...descendants(proc.pid)];
  for (const pid of all) {
    try {
      process.kill(pid, 'SIGKILL');
    } catch {
      // already gone
    }
  }
  if (all.length === 0) proc.kill('SIGKILL');
}

export function exited(proc: ChildProcess): Promise<void> {
  return new Promise<void>((resolve) => {
    if (proc.exitCode !== null || proc.signalCode !== null) return resolve();
    proc.once('exit', () => resolve());
  });
}

/** Tries `answers` until it resolves true, within `ms`; throws with the server's output otherwise. */
export async function waitUntilServing(what: string, proc: ChildProcess, answers: () => Promise<boolean>, output: () => string, ms = 30_000): Promise<void> {
  const deadline = Date.now() + ms;
  while (Date.now() < deadline) {
    if (proc.exitCode !== null || proc.signalCode !== null) throw new Error(`${what} exited (${proc.exitCode ?? proc.signalCode}) before it answered:\n${output()}`);
    if (await answers().catch(() => false)) return;
    await new Promise((r) => setTimeout(r, 100));
  }
  killGroup(proc);
  throw new Error(`${what} did not answer within ${ms} ms:\n${output()}`);
}

/** Removes a server's folder (as root, whatever owns it). */
export function removeFolder(dir: string): void {
  rmSync(dir, { recursive: true, force: true });
}

/** A database server a test started: empty databases on demand, and its life. */
export interface TestDbServer {
  readonly port: number;
  /** A new empty database: its FN_DB_URL, in the form Fn users write. */
  newDatabase(): Promise<string>;
  /** SIGKILL: a crash, every connection dropped. */
  kill(): Promise<void>;
  /** Starts it again after kill(), same port and data. */
  start(): Promise<void>;
  /** Stops it and removes its folder. Idempotent. */
  stop(): Promise<void>;
}

/**
 * A server run by `launch` (which resolves once it answers) in `dir`, with
 * `create` making a named database and answering its URL.
 */
export async function managedServer(port: number, dir: string, launch: () => Promise<ChildProcess>, create: (name: string) => Promise<string>): Promise<TestDbServer> {
  let proc = await launch();
  let n = 0;
  let stopped = false;
  const kill = async (): Promise<void> => {
    killGroup(proc);
    await exited(proc);
    // Down once its port refuses connections (its children, which hold connections, die with it).
    for (const until = Date.now() + 5000; Date.now() < until && (await accepts(port));) await new Promise((r) => setTimeout(r, 20));
  };
  return {
    port,
    newDatabase: () => create(`fnts_${process.pid}_${n++}`),
    kill,
    async start() {
      proc = await launch();
    },
    async stop() {
      if (stopped) return;
      stopped = true;
      await kill();
      removeFolder(dir);
    },
  };
}
