/**
 * Where the key that encrypts secrets at rest comes from (secret-box.ts):
 *
 *   FNTS_SECRET_KEY set            that key (config/ checked its form)
 *   else a data directory          <dataDir>/secret.key: 32 raw bytes, mode 0600,
 *                                  made at the first start, read at every other
 *   else (in-memory database)      a random key for this process: its secrets
 *                                  die with it anyway
 *
 * The key file is kept apart from the database on purpose (a copy of the
 * database alone holds no readable secret) and must be backed up with it
 * (a database restored without its key keeps secrets nobody can read).
 * A file other users could read, or of the wrong size, is refused at start
 * rather than used: the first is a leak, the second a file that is not a key.
 */
import { randomBytes } from 'node:crypto';
import { constants } from 'node:fs';
import { link, mkdir, open, readFile, stat, unlink } from 'node:fs/promises';
import { join } from 'node:path';

/** The key file's name in the data directory. */
export const SECRET_KEY_FILE = 'secret.key';
const KEY_BYTES = 32;

/** The key cannot be had as configured: the message says what to do. */
export class SecretKeyError extends Error {
  override readonly name = 'SecretKeyError';
}

export interface SecretKeySource {
  readonly key: Buffer;
  /** env: FNTS_SECRET_KEY; file: an existing key file; made: a key file made now; process: a key of this process only. */
  readonly from: 'env' | 'file' | 'made' | 'process';
  /** The key file (from file or made). */
  readonly path?: string;
}

/**
 * The key secrets are sealed with: `configured` (FNTS_SECRET_KEY) when
 * given, else the key file of `dataDir` (made when missing), else a key of
 * this process. Throws SecretKeyError for a key file that is not one or that
 * others can read.
 */
export async function loadSecretKey(configured: Buffer | undefined, dataDir: string | undefined): Promise<SecretKeySource> {
  if (configured) return { key: configured, from: 'env' };
  if (dataDir === undefined) return { key: randomBytes(KEY_BYTES), from: 'process' };
  const path = join(dataDir, SECRET_KEY_FILE);
  const existing = await readKeyFile(path);
  if (existing) return { key: existing, from: 'file', path };
  const made = await makeKeyFile(dataDir, path);
  return { key: made.key, from: made.made ? 'made' : 'file', path };
}

/** The key in `path`, checked; undefined when there is no file. */
async function readKeyFile(path: string): Promise<Buffer | undefined> {
  let info;
  try {
    info = await stat(path);
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return undefined;
    throw new SecretKeyError(`the secrets key file ${path} cannot be read (${(err as Error).message}): make it readable by the user fnts runs as, or set FNTS_SECRET_KEY`, { cause: err });
  }
  if (!info.isFile()) throw new SecretKeyError(`the secrets key file ${path} is not a file: remove what is there, or set FNTS_SECRET_KEY`);
  if ((info.mode & 0o077) !== 0) {
    throw new SecretKeyError(`the secrets key file ${path} can be used by other users (mode ${(info.mode & 0o777).toString(8).padStart(4, '0')}); make it the server user's only: chmod 600 ${path}`);
  }
  if (info.size !== KEY_BYTES) {
    throw new SecretKeyError(
      `the secrets key file ${path} holds ${info.size} bytes, not the ${KEY_BYTES} of a key: restore it from the backup of the data directory (without it the stored secrets cannot be read), or, if no secret was ever stored, remove it and a new key is made`,
    );
  }
  try {
    return await readFile(path);
  } catch (err) {
    throw new SecretKeyError(`the secrets key file ${path} cannot be read (${(err as Error).message}): make it readable by the user fnts runs as, or set FNTS_SECRET_KEY`, { cause: err });
  }
}

/**
 * Makes the key file: written whole under a name of its own, flushed, then
 * linked into place, which fails when another server (sharing the data
 * directory, starting at the same moment) linked its key first: that one is
 * used then. The file is never seen half written.
 */
async function makeKeyFile(dataDir: string, path: string): Promise<{ key: Buffer; made: boolean }> {
  const key = randomBytes(KEY_BYTES);
  const staging = `${path}.${process.pid}.${randomBytes(4).toString('hex')}.tmp`;
  try {
    await mkdir(dataDir, { recursive: true });
    const file = await open(staging, constants.O_WRONLY | constants.O_CREAT | constants.O_EXCL, 0o600);
    try {
      await file.writeFile(key);
      await file.sync();
    } finally {
      await file.close();
    }
    try {
      await link(staging, path);
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'EEXIST') throw err;
      const theirs = await readKeyFile(path);
      if (theirs) return { key: theirs, made: false };
      throw err;
    }
    await syncFolder(dataDir);
    return { key, made: true };
  } catch (err) {
    if (err instanceof SecretKeyError) throw err;
    throw new SecretKeyError(`the secrets key file ${path} cannot be made (${(err as Error).message}): make ${dataDir} writable by the user fnts runs as, or set FNTS_SECRET_KEY`, { cause: err });
  } finally {
    await unlink(staging).catch(() => undefined);
  }
}

/** Makes a new entry of `dir` durable (a crash right after start keeps the key the first secrets were sealed with). */
async function syncFolder(dir: string): Promise<void> {
  const handle = await open(dir, constants.O_RDONLY).catch(() => undefined);
  if (!handle) return;
  try {
    await handle.sync().catch(() => undefined);
  } finally {
    await handle.close();
  }
}
