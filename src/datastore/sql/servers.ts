/**
 * The datastore on a database server: Postgres (`pg`) or MySQL/MariaDB
 * (`mysql2`), each through Kysely's own dialect over a pool of
 * FNTS_DB_POOL_SIZE connections. Connections are made within 2 s or the
 * query answers 503 (guard.ts); a server that went away is reconnected to
 * by the pool, query by query.
 */
import { Kysely, MysqlDialect, PostgresDialect } from 'kysely';
import { createPool, type PoolOptions } from 'mysql2';
import pg from 'pg';
import type { DbLocation } from '../../config/index.js';
import { serverWriter } from './batch-writer.js';
import { guarded, mysqlUnavailable, pgUnavailable } from './guard.js';
import { mysqlStatementBatches } from './statement-batches.js';
import { SqlDatastore, type Schema } from './store.js';

export interface ServerOptions {
  /** Connections in the pool. */
  readonly poolSize: number;
  /** Told when the database does not answer (once per failed query), and when an idle connection breaks. */
  readonly onUnavailable?: ((err: unknown) => void) | undefined;
}

/** How long making a connection may take before the request answers 503. */
export const CONNECT_TIMEOUT_MS = 2000;

type PgLocation = Extract<DbLocation, { kind: 'postgres' }>;
type MysqlLocation = Extract<DbLocation, { kind: 'mysql' }>;

/** bigint columns (times in ms, byte counts) as numbers: all of them are far below 2^53. */
const pgTypes = {
  getTypeParser: ((oid: number, format?: 'text' | 'binary') =>
    oid === pg.types.builtins.INT8 ? (v: string) => Number(v) : pg.types.getTypeParser(oid, format as 'text')) as typeof pg.types.getTypeParser,
};

/** libpq's sslmode in node-postgres' terms: disable/allow/prefer connect in plaintext (pg has no fallback), require encrypts without checking, verify-* check the certificate. */
function pgSsl(mode: PgLocation['sslmode']): pg.PoolConfig['ssl'] {
  if (mode === 'disable' || mode === 'allow' || mode === 'prefer') return false;
  if (mode === 'require') return { rejectUnauthorized: false };
  return { rejectUnauthorized: true, ...(mode === 'verify-ca' ? { checkServerIdentity: () => undefined } : {}) };
}

export function postgresPoolConfig(loc: PgLocation, poolSize: number): pg.PoolConfig {
  return {
    host: loc.host,
    port: loc.port,
    user: loc.user,
    ...(loc.password !== undefined ? { password: loc.password } : {}),
    database: loc.database,
    ssl: pgSsl(loc.sslmode),
    max: poolSize,
    connectionTimeoutMillis: CONNECT_TIMEOUT_MS,
    idleTimeoutMillis: 30_000,
    keepAlive: true,
    application_name: 'fnts',
    types: pgTypes,
  };
}

/** Kysely on a pool of connections to the Postgres database `loc`, its errors guarded (guard.ts). */
export function postgresKysely<DB = Schema>(loc: PgLocation, options: ServerOptions): Kysely<DB> {
  const pool = new pg.Pool(postgresPoolConfig(loc, options.poolSize));
  // An idle connection the server closed (a restart) is an event of the pool: without a listener it would end the process.
  pool.on('error', (err) => options.onUnavailable?.(err));
  // So is one that breaks while a query holds it (the server killed mid-query): the query itself
  // rejects (and answers 503), and the error event would otherwise end the process.
  pool.on('connect', (client) => client.on('error', () => undefined));
  return new Kysely<DB>({ dialect: guarded(new PostgresDialect({ pool }), { isUnavailable: pgUnavailable, onUnavailable: options.onUnavailable }) });
}

export async function openPostgres(loc: PgLocation, options: ServerOptions): Promise<SqlDatastore> {
  const db = postgresKysely(loc, options);
  return SqlDatastore.open(db, {
    location: loc,
    // 23505 unique_violation; 53100 disk_full.
    isUniqueViolation: (err) => (err as { code?: unknown } | null)?.code === '23505',
    isStorageFull: (err) => (err as { code?: unknown } | null)?.code === '53100',
    folder: undefined,
    batchWriter: (q) => serverWriter(q, 'postgres'),
  });
}

export function mysqlPoolOptions(loc: MysqlLocation, poolSize: number): PoolOptions {
  return {
    ...(loc.socketPath !== undefined ? { socketPath: loc.socketPath } : { host: loc.host, port: loc.port }),
    user: loc.user,
    ...(loc.password !== undefined ? { password: loc.password } : {}),
    database: loc.database,
    ...(loc.tls === false ? {} : { ssl: { rejectUnauthorized: loc.tls === 'true' } }),
    connectionLimit: poolSize,
    connectTimeout: CONNECT_TIMEOUT_MS,
    enableKeepAlive: true,
    charset: 'utf8mb4_bin',
    supportBigNumbers: true,
    // Timestamps are stored as text; DATETIME columns there are none.
    dateStrings: true,
    timezone: 'Z',
  };
}

/** Kysely on a pool of connections to the MySQL database `loc`, its errors guarded (guard.ts). */
export function mysqlKysely<DB = Schema>(loc: MysqlLocation, options: ServerOptions): Kysely<DB> {
  const pool = createPool(mysqlPoolOptions(loc, options.poolSize));
  // A connection that breaks (the server killed) fails its query (503); its error event must not end the process.
  pool.on('connection', (connection) => connection.on('error', () => undefined));
  return new Kysely<DB>({ dialect: guarded(new MysqlDialect({ pool }), { isUnavailable: mysqlUnavailable, onUnavailable: options.onUnavailable }) });
}

export async function openMysql(loc: MysqlLocation, options: ServerOptions): Promise<SqlDatastore> {
  const db = mysqlKysely(loc, options);
  return SqlDatastore.open(db, {
    location: loc,
    // ER_DUP_ENTRY; ER_RECORD_FILE_FULL, ER_DISK_FULL.
    isUniqueViolation: (err) => (err as { errno?: unknown } | null)?.errno === 1062,
    isStorageFull: (err) => [1114, 1021].includes((err as { errno?: number } | null)?.errno ?? 0),
    folder: undefined,
    batchWriter: (q) => serverWriter(q, 'mysql'),
    statementBatches: () => mysqlStatementBatches(mysqlPoolOptions(loc, options.poolSize), options.onUnavailable),
  });
}
