/**
 * SqlSecretStore: secrets (../secrets.ts) in the datastore's own database,
 * one table for apps' and fns' (migration 0008_secrets). Values are sealed
 * here, before any query sees them, and opened only for a container
 * (valuesFor): what reaches the database, its write-ahead log and its
 * backups is ciphertext, bound to its row by the owner and name.
 */
import { createHash, randomBytes } from 'node:crypto';
import { sql, type Kysely, type Transaction } from 'kysely';
import { ApiError, E, MAX_SECRETS, MAX_SECRETS_BYTES, type SecretInfo, type SecretOwner } from '../../models/index.js';
import { SEAL_OVERHEAD, UnsealError, type SecretBox } from '../secret-box.js';
import type { SecretStore } from '../secrets.js';
import type { DiskWatch } from '../storage.js';
import type { Schema } from './schema.js';

type Db = Kysely<Schema> | Transaction<Schema>;

/** Where a sealed value belongs: what it is bound to (its additional authenticated data). */
function place(kind: SecretOwner['kind'], ownerId: string, name: string): string {
  return `${kind}\0${ownerId}\0${name}`;
}

const info = (r: { name: string; created_at: string; updated_at: string; version: string }): SecretInfo => ({
  name: r.name,
  created_at: r.created_at,
  updated_at: r.updated_at,
  version: r.version,
});

export class SqlSecretStore implements SecretStore {
  constructor(
    private readonly db: () => Kysely<Schema>,
    private readonly box: SecretBox,
    /** The database's disk: a write it has no room for throws StorageFullError. */
    private readonly disk: DiskWatch,
  ) {}

  /** The fingerprint of the key this store seals with (SecretBox.keyId). */
  get keyId(): string {
    return this.box.keyId;
  }

  /** The owner's app, or AppsNotFound / FnsNotFound. */
  private async appOf(db: Db, owner: SecretOwner): Promise<string> {
    if (owner.kind === 'app') {
      const row = await db.selectFrom('apps').select('id').where('id', '=', owner.id).executeTakeFirst();
      if (!row) throw new ApiError(E.AppsNotFound);
      return row.id;
    }
    const row = await db.selectFrom('fns').select('app_id').where('id', '=', owner.id).executeTakeFirst();
    if (!row) throw new ApiError(E.FnsNotFound);
    return row.app_id;
  }

  async putSecret(owner: SecretOwner, name: string, value: Buffer, now: string): Promise<SecretInfo> {
    const sealed = this.box.seal(value, place(owner.kind, owner.id, name));
    const version = randomBytes(8).toString('hex');
    return this.disk.write(() =>
      this.db()
        .transaction()
        .execute(async (trx) => {
          const appId = await this.appOf(trx, owner);
          const held = await trx
            .selectFrom('secrets')
            .select(['name', 'created_at', sql<number>`length(value)`.as('bytes')])
            .where('owner_kind', '=', owner.kind)
            .where('owner_id', '=', owner.id)
            .execute();
          const current = held.find((r) => r.name === name);
          const others = held.filter((r) => r.name !== name);
          const bytes = others.reduce((sum, r) => sum + Number(r.bytes) - SEAL_OVERHEAD, value.length);
          if (others.length + 1 > MAX_SECRETS || bytes > MAX_SECRETS_BYTES) throw new ApiError(E.TooManySecrets);
          const row = { value: sealed, version, key_id: this.box.keyId, updated_at: now };
          if (current) {
            await trx.updateTable('secrets').set(row).where('owner_kind', '=', owner.kind).where('owner_id', '=', owner.id).where('name', '=', name).execute();
            return info({ name, created_at: current.created_at, ...row });
          }
          await trx
            .insertInto('secrets')
            .values({ owner_kind: owner.kind, owner_id: owner.id, name, app_id: appId, fn_id: owner.kind === 'fn' ? owner.id : null, created_at: now, ...row })
            .execute();
          return info({ name, created_at: now, ...row });
        }),
    );
  }

  async listSecrets(owner: SecretOwner): Promise<SecretInfo[]> {
    const db = this.db();
    await this.appOf(db, owner);
    const rows = await db.selectFrom('secrets').select(['name', 'created_at', 'updated_at', 'version']).where('owner_kind', '=', owner.kind).where('owner_id', '=', owner.id).orderBy('name').execute();
    return rows.map(info);
  }

  async removeSecret(owner: SecretOwner, name: string): Promise<void> {
    await this.disk.write(() =>
      this.db()
        .transaction()
        .execute(async (trx) => {
          await this.appOf(trx, owner);
          const res = await trx.deleteFrom('secrets').where('owner_kind', '=', owner.kind).where('owner_id', '=', owner.id).where('name', '=', name).executeTakeFirst();
          if (Number(res.numDeletedRows) === 0) throw new ApiError(E.SecretNotFound);
        }),
    );
  }

  /** The rows a fn's containers get, app's first so that the fn's come last and win. */
  private rowsFor(appId: string, fnId: string) {
    return this.db()
      .selectFrom('secrets')
      .where((eb) => eb.or([eb.and([eb('owner_kind', '=', 'app'), eb('owner_id', '=', appId)]), eb.and([eb('owner_kind', '=', 'fn'), eb('owner_id', '=', fnId)])]))
      .orderBy('owner_kind')
      .orderBy('name');
  }

  async valuesFor(appId: string, fnId: string): Promise<Map<string, Buffer>> {
    const rows = await this.rowsFor(appId, fnId).select(['owner_kind', 'owner_id', 'name', 'value']).execute();
    const values = new Map<string, Buffer>();
    // 'app' sorts before 'fn': a fn's secret replaces its app's of the same name.
    for (const r of rows) {
      try {
        values.set(r.name, this.box.open(r.value, place(r.owner_kind, r.owner_id, r.name)));
      } catch (err) {
        if (!(err instanceof UnsealError)) throw err;
        throw new UnsealError(`the secret ${JSON.stringify(r.name)} of ${r.owner_kind} ${r.owner_id} cannot be decrypted: ${err.message}`, { cause: err });
      }
    }
    return values;
  }

  async versionFor(appId: string, fnId: string): Promise<string> {
    const rows = await this.rowsFor(appId, fnId).select(['owner_kind', 'name', 'version']).execute();
    if (rows.length === 0) return '';
    const h = createHash('sha256');
    for (const r of rows) h.update(r.owner_kind).update('\0').update(r.name).update('\0').update(r.version).update('\0');
    return h.digest('hex').slice(0, 16);
  }

  /**
   * How many stored secrets each other key sealed (by key id): none when
   * every secret opens with this store's key. A server checks it at start,
   * so that a database restored without its key file says so at once.
   */
  async sealedElsewhere(): Promise<Array<{ keyId: string; count: number }>> {
    const rows = await this.db()
      .selectFrom('secrets')
      .select(['key_id', sql<number>`count(*)`.as('n')])
      .where('key_id', '!=', this.box.keyId)
      .groupBy('key_id')
      .execute();
    return rows.map((r) => ({ keyId: r.key_id, count: Number(r.n) }));
  }
}
