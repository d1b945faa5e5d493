/** SqlTokenStore: API tokens (their digests) in the datastore's own database. */
import type { Kysely } from 'kysely';
import type { TokenRecord, TokenStore } from '../tokens.js';
import type { DiskWatch } from '../storage.js';
import type { Schema, TokensTable } from './schema.js';

const toToken = (r: TokensTable): TokenRecord => ({
  id: r.id,
  name: r.name,
  role: r.role,
  apps: r.apps === null ? undefined : (JSON.parse(r.apps) as string[]),
  digest: r.digest,
  created_at: r.created_at,
  expires_at: r.expires_at ?? undefined,
});

export class SqlTokenStore implements TokenStore {
  constructor(
    private readonly db: () => Kysely<Schema>,
    private readonly disk: DiskWatch,
  ) {}

  async listTokens(): Promise<TokenRecord[]> {
    const rows = await this.db().selectFrom('tokens').selectAll().orderBy('created_at').orderBy('id').execute();
    return rows.map(toToken);
  }

  async insertToken(t: TokenRecord): Promise<void> {
    const db = this.db();
    await this.disk.write(() =>
      db
        .insertInto('tokens')
        .values({ id: t.id, name: t.name, role: t.role, apps: t.apps === undefined ? null : JSON.stringify(t.apps), digest: t.digest, created_at: t.created_at, expires_at: t.expires_at ?? null })
        .execute(),
    );
  }

  async removeToken(id: string): Promise<boolean> {
    const db = this.db();
    const result = await this.disk.write(() => db.deleteFrom('tokens').where('id', '=', id).executeTakeFirst());
    return Number(result.numDeletedRows) > 0;
  }
}
