/**
 * The first admin token. FNTS_ADMIN_TOKEN, when set, is one (the operator
 * chose it). Otherwise, when the database holds no admin token, one is made
 * at start and written to `admin.token` (mode 0600) in the data directory;
 * the log says where, never what.
 */
import { chmod, mkdir, rename, stat, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import type { Logger } from 'pino';
import type { TokenStore } from '../datastore/index.js';
import type { TokenRegistry } from './registry.js';
import { newToken } from './token.js';

export const ADMIN_TOKEN_FILE = 'admin.token';

export interface AdminTokenOptions {
  readonly store: TokenStore;
  readonly registry: TokenRegistry;
  /** FNTS_ADMIN_TOKEN was set. */
  readonly fromEnv: boolean;
  /** Where admin.token goes (FNTS_DATA_DIR, else the SQLite file's folder). */
  readonly dataDir: string;
  readonly log: Logger;
}

/** Makes the first admin token when there is none; resolves with the file it wrote, if it wrote one. */
export async function ensureAdminToken({ store, registry, fromEnv, dataDir, log }: AdminTokenOptions): Promise<string | undefined> {
  if (fromEnv) {
    log.info('API tokens on: FNTS_ADMIN_TOKEN is an admin token');
    return undefined;
  }
  const file = join(dataDir, ADMIN_TOKEN_FILE);
  if (registry.hasStoredAdmin()) {
    const there = await stat(file).then(
      () => true,
      () => false,
    );
    log.info(
      there ? { file } : {},
      there
        ? `API tokens on: the first admin token is in ${file} (export FN_TOKEN=$(cat ${file}))`
        : 'API tokens on: the database holds admin tokens; use one (FN_TOKEN), or set FNTS_ADMIN_TOKEN to a secret of 32 characters or more to get in',
    );
    return undefined;
  }
  const { id, token, digest } = newToken();
  // Written before it is stored: a token nobody can read would lock the operator out.
  await mkdir(dataDir, { recursive: true, mode: 0o700 });
  const partial = `${file}.${process.pid}.tmp`;
  try {
    await writeFile(partial, `${token}\n`, { mode: 0o600, flag: 'w' });
    await chmod(partial, 0o600);
    await rename(partial, file);
  } catch (err) {
    throw new Error(`could not write the first admin token to ${file} (${(err as Error).message}); set FNTS_DATA_DIR to a writable folder, or FNTS_ADMIN_TOKEN to a secret of 32 characters or more`, {
      cause: err,
    });
  }
  await store.insertToken({ id, name: 'admin', role: 'admin', apps: undefined, digest, created_at: new Date().toISOString(), expires_at: undefined });
  await registry.refresh();
  log.info({ file }, `API tokens on: made the first admin token, in ${file} (export FN_TOKEN=$(cat ${file}))`);
  return file;
}
