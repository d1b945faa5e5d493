/**
 * Secrets as files: each container of a fn that has secrets (its app's and
 * its own, the fn's winning) gets them as read-only files /run/secrets/<name>.
 * Never as environment variables: those show in `docker inspect`, in
 * /proc/<pid>/environ and in every child process.
 *
 * The values are read once per container, when it starts (a cold call's
 * container: per call), from a SecretSource, and written into a folder of
 * the container's own beside its socket folder:
 *
 *   <socket folder of this process>/<container id>.secrets/   0700: nobody else on the host gets in
 *                                                  files/    0555: bound read-only at /run/secrets
 *                                                  files/<name>  0444: readable by the function's user
 *
 * The folder is a tmpfs of its own, sized to what it holds, where this
 * server mounts the socket folders' (FN_IOFS_TMPFS, iofs.ts): the values are
 * in memory only, and go with the container. Elsewhere it is a plain folder
 * on the host's disk, readable by this server's user only, removed with the
 * container (or, after a crash, at the next start); the server says so
 * once, at warn.
 *
 * What changes which secrets a fn has retires its containers (a change of
 * its app or fn on the change feed, and CallFn.secretsVersion in its slot
 * key), so a new value reaches the next container, as a config change does.
 */
import { chmod, mkdir, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import type { Logger } from 'pino';
import type { Mount } from '../drivers/index.js';
import { ApiError, E } from '../models/index.js';
import { mountTmpfs, removeSocketTree } from './iofs.js';
import type { FunctionSpec } from './spec.js';

/** Where the files appear in the container. */
export const SECRETS_PATH = '/run/secrets';

/** Where a container's secrets come from. */
export interface SecretSource {
  /**
   * The secrets a container of fn `fnId` of app `appId` gets, by name: the
   * app's and the fn's, the fn's winning. Called once per container start;
   * may be slow (a database read). Rejects when they cannot be read, saying
   * why (which secret) and never what a value is. `version`: the fn's
   * CallFn.secretsVersion the container is for (undefined: none), for a
   * source that holds what its calls brought (a pure runner's).
   */
  secretsFor(appId: string, fnId: string, version?: string): Promise<ReadonlyMap<string, Buffer>>;
}

/** How containers' secret folders are made and removed. */
export interface SecretFolders {
  /** 'tmpfs': each folder is a tmpfs of its own (in memory); 'folder': a plain folder on the host's disk. */
  readonly mode: 'tmpfs' | 'folder';
  /** Makes `dir` holding `files` (see the layout above); resolves with the folder to bind at /run/secrets. */
  open(dir: string, files: ReadonlyMap<string, Buffer>): Promise<string>;
  /** Removes `dir` and what it holds (unmounted first when it is a mount). Never rejects. */
  close(dir: string): Promise<void>;
}

/** What an agent that gives functions their secrets holds. */
export interface AgentSecrets {
  readonly source: SecretSource;
  readonly folders: SecretFolders;
}

const PAGE = 4096;

/** Room for the files (each takes whole pages) and the folders, never 0 (which would be "no limit"). */
function tmpfsOptions(files: ReadonlyMap<string, Buffer>): string {
  let bytes = 2 * PAGE;
  for (const value of files.values()) bytes += Math.ceil(value.length / PAGE) * PAGE;
  return `size=${bytes},nr_inodes=${files.size + 8},mode=0700,nosuid,nodev,noexec`;
}

/** Writes the files into `dir` (which exists, mode 0700) and closes their folder to writes. */
async function layOut(dir: string, files: ReadonlyMap<string, Buffer>): Promise<string> {
  const inner = join(dir, 'files');
  await mkdir(inner, { mode: 0o700 });
  // Names were checked when they were set (models/secret.ts): no '/', not '.' or '..'.
  for (const [name, value] of files) await writeFile(join(inner, name), value, { mode: 0o444, flag: 'wx' });
  await chmod(inner, 0o555);
  return inner;
}

class TmpfsFolders implements SecretFolders {
  readonly mode = 'tmpfs';

  async open(dir: string, files: ReadonlyMap<string, Buffer>): Promise<string> {
    await mkdir(dir, { recursive: true, mode: 0o700 });
    await mountTmpfs(dir, tmpfsOptions(files), 'fnts-secrets');
    return layOut(dir, files);
  }

  async close(dir: string): Promise<void> {
    await removeSocketTree(dir).catch(() => undefined);
  }
}

class PlainFolders implements SecretFolders {
  readonly mode = 'folder';

  async open(dir: string, files: ReadonlyMap<string, Buffer>): Promise<string> {
    await mkdir(dir, { recursive: true, mode: 0o700 });
    await chmod(dir, 0o700);
    return layOut(dir, files);
  }

  async close(dir: string): Promise<void> {
    await removeSocketTree(dir).catch(() => undefined);
  }
}

/** Plain folders (FN_IOFS_TMPFS=false, or where this server cannot mount): for tests of the logic, too. */
export const plainSecretFolders: SecretFolders = new PlainFolders();

/**
 * How this server makes secret folders: tmpfs mounts where it mounts the
 * socket folders' (`socketMode`, decided by iofs.ts's socketDirs()), else
 * plain folders, which it says once, at warn.
 */
export function secretFolders(socketMode: 'tmpfs' | 'folder', root: string, log: Logger): SecretFolders {
  if (socketMode === 'tmpfs') return new TmpfsFolders();
  log.warn(
    { iofs: root },
    "functions' secrets are written to plain folders on this host's disk (readable by this server's user only, removed with their containers), not to tmpfs mounts in memory: run fnts as root beside the Docker engine with FN_IOFS_TMPFS=auto or true to keep them off the disk",
  );
  return plainSecretFolders;
}

/**
 * Reads the secrets of `spec`'s fn and lays them out in `dir` for one
 * container: the mount to give it, or undefined when the fn has none
 * (nothing is made then). On failure nothing is left behind, the reason is
 * logged (names, never values) and ApiError SecretsUnavailable is thrown:
 * the container is not started without its secrets.
 */
export async function secretsMount(secrets: AgentSecrets | undefined, spec: FunctionSpec, dir: string, log: Logger): Promise<Mount | undefined> {
  if (!secrets) return undefined;
  try {
    const files = await secrets.source.secretsFor(spec.appId, spec.fnId, spec.secretsVersion);
    if (files.size === 0) return undefined;
    const hostPath = await secrets.folders.open(dir, files);
    return { hostPath, containerPath: SECRETS_PATH, readOnly: true };
  } catch (err) {
    await secrets.folders.close(dir);
    const reason = err instanceof Error ? err.message : String(err);
    log.warn({ app: spec.appId, fn: spec.fnId, reason }, `the secrets of fn ${spec.fnId} could not be given to its container (${reason}); its calls fail until they can be read`);
    throw new ApiError(E.SecretsUnavailable, { cause: err });
  }
}
