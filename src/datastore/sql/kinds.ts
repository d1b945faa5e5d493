/**
 * The three databases the SQL datastore runs on, and where their SQL
 * differs for the schema: which database a Kysely instance talks to (its
 * adapter), and the column types the migrations use.
 *
 * - Names, ids and timestamps are compared bytewise everywhere (lists are
 *   ordered by name, calls by creation time, uniqueness is exact): SQLite
 *   does so by default; Postgres columns take the "C" collation, whatever
 *   the database's own; MySQL tables take utf8mb4_bin (its default
 *   collations ignore case, so `Foo` and `foo` would clash).
 * - Binary columns: SQLite's blob, Postgres' bytea, MySQL's longblob;
 *   documents (config, records, logs): text, MySQL's longtext.
 */
import { MysqlAdapter, PostgresAdapter, sql, type ColumnDataType, type CreateTableBuilder, type Expression, type Kysely } from 'kysely';

/** A column's type as the schema builder takes it. */
type DataTypeExpression = ColumnDataType | Expression<unknown>;

export type SqlKind = 'sqlite' | 'postgres' | 'mysql';

/** Which database `db` talks to, from its dialect's adapter. */
export function kindOf(db: { getExecutor(): { readonly adapter: unknown } }): SqlKind {
  const adapter = db.getExecutor().adapter;
  if (adapter instanceof PostgresAdapter) return 'postgres';
  if (adapter instanceof MysqlAdapter) return 'mysql';
  return 'sqlite';
}

/** A string column of at most `n` characters, compared bytewise. */
export function str(db: Kysely<unknown>, n: number): DataTypeExpression {
  const kind = kindOf(db);
  if (kind === 'postgres') return sql`varchar(${sql.raw(String(n))}) collate "C"`;
  return `varchar(${n})`;
}

/** A document column (JSON, logs, images' names). */
export function text(db: Kysely<unknown>): DataTypeExpression {
  return kindOf(db) === 'mysql' ? sql`longtext` : 'text';
}

/** A binary column. */
export function blob(db: Kysely<unknown>): DataTypeExpression {
  const kind = kindOf(db);
  if (kind === 'postgres') return 'bytea';
  if (kind === 'mysql') return sql`longblob`;
  return 'blob';
}

/** `CREATE TABLE name`, on MySQL InnoDB with bytewise utf8mb4. */
export function createTable(db: Kysely<unknown>, name: string): CreateTableBuilder<string, never> {
  const table = db.schema.createTable(name);
  return kindOf(db) === 'mysql' ? table.modifyEnd(sql`engine = InnoDB default charset = utf8mb4 collate = utf8mb4_bin`) : table;
}
