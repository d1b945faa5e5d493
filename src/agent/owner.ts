/**
 * Whose containers are whose. Every container an agent starts carries:
 *
 *   fnts.owner     the server's data directory (config: a hash of the
 *                  canonical database location), stable across restarts
 *   fnts.instance  the process that started it: host, pid and the pid's
 *                  start time, so a reused pid is not mistaken for it
 *   fnts.tag       FN_CONTAINER_LABEL_TAG, when set
 *
 * At start an agent removes the containers of its owner whose instance is
 * dead (an earlier run that was killed), and leaves alone those of a live
 * instance: two servers on one data directory never remove each other's
 * containers. An instance on another host cannot be checked, so its
 * containers are left alone too.
 *
 * Socket folders follow the same rule, and carry their instance themselves:
 * each instance keeps its containers' folders in one folder of its own
 * under FN_IOFS_PATH, which names the instance in a file:
 *
 *   <FN_IOFS_PATH>/<key>/instance          host/pid/start of the process
 *   <FN_IOFS_PATH>/<key>/<container id>/   one container's sockets
 *
 * so whose a folder is can be told from the folder alone, whatever became of
 * its container (being created when the server was killed, created, gone)
 * and however it is mounted. An instance folder appears whole (made aside,
 * then renamed into place), so one without its file is never a live
 * instance's that is just being made.
 */
import { createHash } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { mkdir, mkdtemp, readdir, readFile, rename, rm, stat, writeFile } from 'node:fs/promises';
import { hostname } from 'node:os';
import { join } from 'node:path';
import { removeSocketTree } from './iofs.js';

export { INSTANCE_LABEL, OWNER_LABEL, TAG_LABEL } from '../models/index.js';

/** The start time of process `pid`, in clock ticks since boot (field 22 of /proc/<pid>/stat); '' when unreadable. */
function processStartTicks(pid: number | 'self'): string {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    // The command name (field 2) may hold spaces and parentheses: count from the last ')'.
    const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    return fields[19] ?? '';
  } catch {
    return '';
  }
}

/** This process's instance identity: `<host>/<pid>/<start ticks>`. */
export function selfInstance(): string {
  return `${hostname()}/${process.pid}/${processStartTicks('self')}`;
}

/**
 * Whether the process named by an instance identity still runs: true or
 * false on this host; undefined when it cannot be told (another host, or a
 * label this version does not read).
 */
export function instanceAlive(instance: string): boolean | undefined {
  const m = /^(.*)\/(\d+)\/(\d*)$/.exec(instance);
  if (!m || m[1] !== hostname()) return undefined;
  const pid = Number(m[2]);
  if (pid === process.pid) return m[3] === processStartTicks('self');
  const started = processStartTicks(pid);
  if (started !== '') return m[3] === '' || started === m[3];
  try {
    process.kill(pid, 0);
    // Alive, but /proc cannot confirm it is the same process: assume it is.
    return true;
  } catch (err) {
    return (err as NodeJS.ErrnoException).code === 'EPERM';
  }
}

/** The file in an instance's socket folder that names the instance. */
export const INSTANCE_FILE = 'instance';
/** Instance folders are made under this prefix, then renamed into place. */
const STAGING_PREFIX = '.claim-';
/** A staging folder older than this was left by a process killed while it made it. */
const STAGING_STALE_MS = 60_000;

/**
 * The folder under `root` for the socket folders of `instance`'s
 * containers. Its name is short (unix socket paths are limited): 8 hex
 * characters of the identity's hash.
 */
export function socketFolder(root: string, instance: string): string {
  return join(root, createHash('sha256').update(instance).digest('hex').slice(0, 8));
}

/**
 * Makes `instance`'s socket folder under `root` (see socketFolder), with
 * the file that names it; resolves with its path. Already there with the
 * same identity (start() again): left as it is.
 */
export async function claimSocketFolder(root: string, instance: string): Promise<string> {
  const folder = socketFolder(root, instance);
  await mkdir(root, { recursive: true });
  const staging = await mkdtemp(join(root, STAGING_PREFIX));
  try {
    await writeFile(join(staging, INSTANCE_FILE), instance);
    await rename(staging, folder);
  } catch (err) {
    await rm(staging, { recursive: true, force: true });
    const code = (err as NodeJS.ErrnoException).code;
    if (code !== 'EEXIST' && code !== 'ENOTEMPTY') throw err;
    const holder = await readFile(join(folder, INSTANCE_FILE), 'utf8').catch(() => '');
    if (holder !== instance) throw new Error(`the socket folder ${folder} belongs to ${holder || 'no known instance'}, not to this process (${instance}); remove it`, { cause: err });
  }
  return folder;
}

export interface SocketFolderSweep {
  /** Folders removed: instance folders of dead instances, and leftovers of their making. */
  readonly removed: number;
  /** Folders that could not be removed (path and why). */
  readonly failed: ReadonlyArray<{ readonly path: string; readonly reason: string }>;
  /**
   * Entries in no instance folder: container folders of earlier fnts
   * versions, which kept them directly under the root. Whose they are
   * cannot be told from them.
   */
  readonly unowned: readonly string[];
}

/**
 * Removes under `root` every instance folder whose instance is provably
 * dead (`isAlive` false), with everything in it, and staging folders older
 * than a minute. Leaves this process's (`self`), live instances' and those
 * `isAlive` cannot judge (another host); never rejects for one folder.
 */
export async function sweepSocketFolders(root: string, self: string, isAlive: (instance: string) => boolean | undefined, now = Date.now()): Promise<SocketFolderSweep> {
  let removed = 0;
  const failed: Array<{ path: string; reason: string }> = [];
  const unowned: string[] = [];
  const remove = async (path: string): Promise<void> => {
    try {
      // A killed server's containers' socket tmpfs mounts go with it.
      await removeSocketTree(path);
      removed++;
    } catch (err) {
      failed.push({ path, reason: err instanceof Error ? err.message : String(err) });
    }
  };
  for (const entry of await readdir(root).catch(() => [])) {
    const path = join(root, entry);
    if (entry.startsWith(STAGING_PREFIX)) {
      const info = await stat(path).catch(() => undefined);
      if (info && now - info.mtimeMs > STAGING_STALE_MS) await remove(path);
      continue;
    }
    const holder = await readFile(join(path, INSTANCE_FILE), 'utf8').catch(() => undefined);
    if (holder === undefined) unowned.push(path);
    else if (holder !== self && isAlive(holder) === false) await remove(path);
  }
  return { removed, failed, unowned };
}
