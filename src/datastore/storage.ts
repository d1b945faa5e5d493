/**
 * A full disk under the database. Every write the datastore makes (apps,
 * fns, triggers, call records) goes through its DiskWatch, which turns the
 * database's "disk full" failure into StorageFullError (503, in Fn's error
 * shape, naming the cause) and remembers that the disk is full until a
 * write succeeds again:
 *
 *   room ──a write fails: disk full──> full ──a write succeeds, or the
 *    ^                                  │     readiness check finds room──┐
 *    └──────────────────────────────────┴─────────────────────────────────┘
 *
 * While full, the server is not ready (GET /ready names the cause), API
 * changes answer 503, and call records wait in memory (server/records.ts).
 */
import { rm, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { ApiError, type ErrorDef } from '../models/index.js';

/** fnts's own answer: Fn has none for a full disk (it answers 500). */
export const DATABASE_DISK_FULL: ErrorDef = Object.freeze({
  code: 'DatabaseDiskFull',
  status: 503,
  message: "The database's disk is full, so the change was not saved; free space on it and try again",
});

/** A write the database refused because its disk is full: nothing of it was stored. */
export class StorageFullError extends ApiError {
  override readonly name = 'StorageFullError';
  constructor(cause: unknown) {
    super(DATABASE_DISK_FULL, { cause });
  }
}

/** How much the readiness check writes beside the database to see whether the disk has room again: a few pages of a write. */
const ROOM_PROBE_BYTES = 64 * 1024;

export class DiskWatch {
  private fullAt: number | undefined;

  /**
   * `folder`: the database's folder on disk (undefined: it lives in
   * memory, and no disk can fill up). `isFull`: whether an error of the
   * database's driver means its disk is full.
   */
  constructor(
    private readonly folder: string | undefined,
    private readonly isFull: (err: unknown) => boolean,
  ) {}

  /** When the disk was found full (ms since the epoch); undefined while it has room. */
  get fullSince(): number | undefined {
    return this.fullAt;
  }

  /** Runs a write: its success means the disk has room; a disk-full failure becomes StorageFullError; other errors pass as they are. */
  async write<T>(op: () => Promise<T>): Promise<T> {
    try {
      const result = await op();
      this.fullAt = undefined;
      return result;
    } catch (err) {
      if (!this.isFull(err)) throw err;
      this.fullAt ??= Date.now();
      throw new StorageFullError(err);
    }
  }

  /**
   * The readiness check: resolves while the disk has room. Once it was
   * found full, a small file is written beside the database (and removed):
   * when that succeeds there is room again. Rejects with what to do.
   */
  async check(): Promise<void> {
    if (this.fullAt === undefined || this.folder === undefined) return;
    const probe = join(this.folder, `.fnts-room-${process.pid}`);
    try {
      await writeFile(probe, Buffer.alloc(ROOM_PROBE_BYTES));
      this.fullAt = undefined;
    } catch {
      // Still full (or not writable at all): the next check tries again.
    } finally {
      await rm(probe, { force: true }).catch(() => undefined);
    }
    if (this.fullAt === undefined) return;
    throw new Error(
      `the database's disk is full (since ${new Date(this.fullAt).toISOString()}): changes to apps, fns and triggers answer 503 and call records wait in memory; free space in ${this.folder}`,
    );
  }
}

/** fnts's own answer while the database server does not answer (Fn answers 500). */
export const DATABASE_UNAVAILABLE: ErrorDef = Object.freeze({
  code: 'DatabaseUnavailable',
  status: 503,
  message: 'The database does not answer, so the request was not served; try again shortly (fnts reconnects by itself)',
});

/** fnts's answer when a SQLite file stayed locked by another writer past the busy timeout (5 s): nothing was changed. */
export const DATABASE_BUSY: ErrorDef = Object.freeze({
  code: 'DatabaseBusy',
  status: 503,
  message: 'The database was busy with other writes for too long, so nothing was changed; try again shortly',
});

/** A change SQLite refused because the file stayed locked (SQLITE_BUSY): nothing of it was done. */
export class DatabaseBusyError extends ApiError {
  override readonly name = 'DatabaseBusyError';
  constructor(cause: unknown) {
    super(DATABASE_BUSY, { cause, headers: { 'Retry-After': '1' } });
  }
}

/** A query the database server did not answer (down, restarting, out of reach): nothing of it was done, or a transaction of it was rolled back. */
export class DatabaseUnavailableError extends ApiError {
  override readonly name = 'DatabaseUnavailableError';
  constructor(cause: unknown) {
    super(DATABASE_UNAVAILABLE, { cause, headers: { 'Retry-After': '1' } });
  }
}

/**
 * Whether `err` would fail any write tried now, not only the one that met
 * it (a full disk, a database that does not answer): a batch refused so is
 * failed whole, where another refusal is tried again part by part.
 */
export function failsEveryWrite(err: unknown): boolean {
  return err instanceof StorageFullError || err instanceof DatabaseUnavailableError;
}
