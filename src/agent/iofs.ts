/**
 * Containers' socket folders (FN_IOFS_PATH/<instance>/<container>, mounted
 * at /tmp/iofs in the container), where the FDK binds its socket.
 *
 * The folder is writable by the function (it must create its socket), so
 * as a plain host folder it would also be a place to store data on the
 * host's disk, without limit (a 128 MB function once wrote 300 MB there).
 * So each container's folder is a tmpfs of its own, mounted on the host by
 * this process, of SOCKET_TMPFS_BYTES: room for sockets and links, none for
 * data (a write past it fails with ENOSPC, in the function). Its pages are
 * charged to the memory of the container that writes them.
 *
 * Mounting needs root (CAP_SYS_ADMIN), and the mount must be where the
 * engine looks: in its mount namespace. FN_IOFS_TMPFS=auto (the default)
 * mounts when a trial mount works and this process shares the engine's
 * mount namespace (the engine's pid file names it); otherwise folders are
 * plain ones and the server says so once, at warn. FN_IOFS_TMPFS=true
 * mounts whenever it can (the operator vouches that mounts here reach the
 * engine, e.g. a bind with shared propagation) and refuses to start when
 * it cannot; false never mounts.
 */
import { execFile } from 'node:child_process';
import { chmod, mkdir, readFile, readlink, rm } from 'node:fs/promises';
import { join } from 'node:path';
import { promisify } from 'node:util';
import type { Logger } from 'pino';

const run = promisify(execFile);

/** Room for an FDK's socket, its link and a few more entries; no room for data. */
export const SOCKET_TMPFS_BYTES = 64 * 1024;
const SOCKET_TMPFS_INODES = 64;
const MOUNT_OPTIONS = `size=${SOCKET_TMPFS_BYTES},nr_inodes=${SOCKET_TMPFS_INODES},mode=0777,nosuid,nodev,noexec`;

export type IofsTmpfsSetting = 'auto' | 'true' | 'false';

export interface SocketDirs {
  /** 'tmpfs': each folder is a size-capped tmpfs; 'folder': plain folders on the host's disk. */
  readonly mode: 'tmpfs' | 'folder';
  /** Makes a container's folder, writable by the function's user. */
  open(dir: string): Promise<void>;
  /** Removes a container's folder (unmounted first when it is a mount). Never rejects. */
  close(dir: string): Promise<void>;
}

/** Mounts a tmpfs on `dir` (which exists): a socket folder's, unless other options (and a name for `mount` to show) are given. */
export async function mountTmpfs(dir: string, options = MOUNT_OPTIONS, source = 'fnts-iofs'): Promise<void> {
  await run('mount', ['-t', 'tmpfs', '-o', options, source, dir], { timeout: 10_000 });
}

/**
 * Mount points under `root` (itself included), deepest first, from
 * /proc/self/mountinfo; [] where that cannot be read.
 */
export async function mountsUnder(root: string): Promise<string[]> {
  let info: string;
  try {
    info = await readFile('/proc/self/mountinfo', 'utf8');
  } catch {
    return [];
  }
  const prefix = root.endsWith('/') ? root : `${root}/`;
  const found: string[] = [];
  for (const line of info.split('\n')) {
    // Field 5 is the mount point, with spaces and the like escaped as octal (\040).
    const point = line.split(' ')[4]?.replace(/\\([0-7]{3})/g, (_, o: string) => String.fromCharCode(parseInt(o, 8)));
    if (point !== undefined && (point === root || point.startsWith(prefix))) found.push(point);
  }
  return found.sort((a, b) => b.length - a.length);
}

/**
 * Removes `path` and everything under it, unmounting what is mounted there
 * first (a socket tmpfs left by a server that was killed); rejects when a
 * mount or the folder cannot be removed.
 */
export async function removeSocketTree(path: string): Promise<void> {
  for (const point of await mountsUnder(path)) {
    // Lazy: a mount still in use (a container not yet gone) is detached now and freed once it is not.
    await run('umount', ['-l', point], { timeout: 10_000 });
  }
  await rm(path, { recursive: true, force: true });
}

class TmpfsDirs implements SocketDirs {
  readonly mode = 'tmpfs';

  async open(dir: string): Promise<void> {
    await mkdir(dir, { recursive: true });
    await mountTmpfs(dir);
  }

  async close(dir: string): Promise<void> {
    await removeSocketTree(dir).catch(() => undefined);
  }
}

class PlainDirs implements SocketDirs {
  readonly mode = 'folder';

  async open(dir: string): Promise<void> {
    await mkdir(dir, { recursive: true });
    // The function runs as an unprivileged user and must create its socket here.
    await chmod(dir, 0o777);
  }

  async close(dir: string): Promise<void> {
    await rm(dir, { recursive: true, force: true }).catch(() => undefined);
  }
}

/** Where the Docker engine writes its pid (dockerd's default --pidfile). */
const ENGINE_PID_FILE = '/var/run/docker.pid';

/**
 * Whether this process shares the Docker engine's mount namespace, so that
 * what it mounts is what the engine binds into containers: true or false
 * when the engine's pid file and namespace can be read; undefined when not
 * (another pid file, an engine elsewhere, this process in a container).
 */
async function sharesEngineMounts(): Promise<boolean | undefined> {
  try {
    const pid = (await readFile(ENGINE_PID_FILE, 'utf8')).trim();
    if (!/^\d+$/.test(pid)) return undefined;
    const [engine, self] = await Promise.all([readlink(`/proc/${pid}/ns/mnt`), readlink('/proc/self/ns/mnt')]);
    return engine === self;
  } catch {
    return undefined;
  }
}

/** Plain folders: for tests of the scheduling logic, and where FN_IOFS_TMPFS=false. */
export const plainSocketDirs: SocketDirs = new PlainDirs();

/**
 * How this process makes socket folders under `root`, per FN_IOFS_TMPFS:
 * 'auto' mounts a tmpfs per container when a trial mount under `root`
 * works, and otherwise says once, at warn, that functions can write to the
 * host's disk there; 'true' rejects when it does not work; 'false' never
 * mounts.
 */
export async function socketDirs(setting: IofsTmpfsSetting, root: string, log: Logger): Promise<SocketDirs> {
  if (setting === 'false') {
    log.warn({ iofs: root }, "FN_IOFS_TMPFS=false: functions can write files of any size into their socket folders on this host's disk");
    return plainSocketDirs;
  }
  const failure = (setting === 'auto' ? await engineMountsProblem() : undefined) ?? (await trialMount(join(root, `.probe-${process.pid}`)));
  if (failure === undefined) return new TmpfsDirs();
  if (setting === 'true') {
    throw new Error(
      `FN_IOFS_TMPFS=true, but this process cannot mount a tmpfs for containers' socket folders under ${root} (${failure}): run fnts as root (or with CAP_SYS_ADMIN), or set FN_IOFS_TMPFS=auto`,
    );
  }
  log.warn(
    { iofs: root, reason: failure },
    "containers' socket folders are plain folders, not size-capped tmpfs mounts: functions can write files of any size into them on this host's disk (run fnts as root beside the Docker engine, or set FN_IOFS_TMPFS=true to refuse to start instead)",
  );
  return plainSocketDirs;
}

/** Why mounts made here might not be what the engine sees; undefined when this process shares its mount namespace. */
async function engineMountsProblem(): Promise<string | undefined> {
  const shared = await sharesEngineMounts();
  if (shared === true) return undefined;
  return shared === false ? 'this process is in another mount namespace than the Docker engine' : `the Docker engine's mount namespace cannot be told (no readable ${ENGINE_PID_FILE})`;
}

/** Mounts and unmounts a socket tmpfs at `probe`; why it failed, or undefined. */
async function trialMount(probe: string): Promise<string | undefined> {
  try {
    await mkdir(probe, { recursive: true });
    await mountTmpfs(probe);
    return undefined;
  } catch (err) {
    return (err as { stderr?: string }).stderr?.trim() || (err instanceof Error ? err.message : String(err));
  } finally {
    await removeSocketTree(probe).catch(() => undefined);
  }
}
