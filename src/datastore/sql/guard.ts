/**
 * A database server that is down, restarting or out of reach is one
 * answer, whoever asks: every query of the datastore, the call records, the
 * tokens, the secrets and the queue that fails because the database does
 * not answer throws DatabaseUnavailableError (503, in Fn's error shape),
 * which the API sends as it is. The guard wraps the dialect's driver, so no
 * query is left out; errors of the query itself (a duplicate name, a full
 * disk) pass unchanged.
 *
 * The pool behind the driver reconnects by itself: each query asks it for a
 * connection, and a new one is made once the server answers again (within
 * its connect timeout, 2 s). `onUnavailable`/`onAnswered` tell the
 * datastore's health (readiness says not ready in between).
 */
import type { DatabaseConnection, Dialect, Driver, QueryResult, TransactionSettings } from 'kysely';
import type { CompiledQuery, QueryCompiler } from 'kysely';
import { DatabaseUnavailableError } from '../storage.js';

export interface GuardOptions {
  /** Whether a driver error means the database does not answer (connection refused, lost, timed out, shutting down). */
  readonly isUnavailable: (err: unknown) => boolean;
  /** Told each time the database is found not to answer, with why. */
  readonly onUnavailable?: ((err: unknown) => void) | undefined;
}

class GuardedConnection implements DatabaseConnection {
  constructor(
    readonly inner: DatabaseConnection,
    private readonly check: <T>(op: () => Promise<T>) => Promise<T>,
  ) {}

  executeQuery<R>(query: CompiledQuery): Promise<QueryResult<R>> {
    return this.check(() => this.inner.executeQuery<R>(query));
  }

  streamQuery<R>(query: CompiledQuery, chunkSize?: number): AsyncIterableIterator<QueryResult<R>> {
    return this.inner.streamQuery<R>(query, chunkSize);
  }
}

const unwrap = (c: DatabaseConnection): DatabaseConnection => (c instanceof GuardedConnection ? c.inner : c);

class GuardedDriver implements Driver {
  readonly savepoint?: Driver['savepoint'];
  readonly rollbackToSavepoint?: Driver['rollbackToSavepoint'];
  readonly releaseSavepoint?: Driver['releaseSavepoint'];

  constructor(
    private readonly inner: Driver,
    options: GuardOptions,
  ) {
    this.check = guard(options);
    if (inner.savepoint) this.savepoint = (c: DatabaseConnection, name: string, compile: QueryCompiler['compileQuery']) => this.check(() => inner.savepoint!(unwrap(c), name, compile));
    if (inner.rollbackToSavepoint)
      this.rollbackToSavepoint = (c: DatabaseConnection, name: string, compile: QueryCompiler['compileQuery']) => this.check(() => inner.rollbackToSavepoint!(unwrap(c), name, compile));
    if (inner.releaseSavepoint)
      this.releaseSavepoint = (c: DatabaseConnection, name: string, compile: QueryCompiler['compileQuery']) => this.check(() => inner.releaseSavepoint!(unwrap(c), name, compile));
  }

  readonly check: <T>(op: () => Promise<T>) => Promise<T>;

  init(): Promise<void> {
    return this.check(() => this.inner.init());
  }

  async acquireConnection(): Promise<DatabaseConnection> {
    return new GuardedConnection(await this.check(() => this.inner.acquireConnection()), this.check);
  }

  beginTransaction(c: DatabaseConnection, settings: TransactionSettings): Promise<void> {
    return this.check(() => this.inner.beginTransaction(unwrap(c), settings));
  }

  commitTransaction(c: DatabaseConnection): Promise<void> {
    return this.check(() => this.inner.commitTransaction(unwrap(c)));
  }

  rollbackTransaction(c: DatabaseConnection): Promise<void> {
    return this.check(() => this.inner.rollbackTransaction(unwrap(c)));
  }

  releaseConnection(c: DatabaseConnection): Promise<void> {
    return this.inner.releaseConnection(unwrap(c));
  }

  destroy(): Promise<void> {
    return this.inner.destroy();
  }
}

/** Runs an operation on the database, its "database does not answer" errors turned into DatabaseUnavailableError (and told). */
export function guard(options: GuardOptions): <T>(op: () => Promise<T>) => Promise<T> {
  return async (op) => {
    try {
      return await op();
    } catch (err) {
      if (err instanceof DatabaseUnavailableError || !options.isUnavailable(err)) throw err;
      options.onUnavailable?.(err);
      throw new DatabaseUnavailableError(err);
    }
  };
}

/** `dialect` with its driver's "database does not answer" errors turned into DatabaseUnavailableError. */
export function guarded(dialect: Dialect, options: GuardOptions): Dialect {
  return {
    createAdapter: () => dialect.createAdapter(),
    createDriver: () => new GuardedDriver(dialect.createDriver(), options),
    createIntrospector: (db) => dialect.createIntrospector(db),
    createQueryCompiler: () => dialect.createQueryCompiler(),
  };
}

/** Error codes of Node's sockets that mean the server is not there (any driver). */
const SOCKET_CODES = new Set(['ECONNREFUSED', 'ECONNRESET', 'ETIMEDOUT', 'EPIPE', 'ENOTFOUND', 'EHOSTUNREACH', 'ENETUNREACH', 'EAI_AGAIN', 'ECONNABORTED', 'ENOENT']);

/** Postgres: a socket error, SQLSTATE class 08 (connection exception), 57P01-57P03 (shutting down, cannot connect now), 53300 (too many connections), or pg's own words for a lost or timed-out connection. */
export function pgUnavailable(err: unknown): boolean {
  const e = err as { code?: unknown; message?: unknown } | null;
  const code = typeof e?.code === 'string' ? e.code : '';
  if (SOCKET_CODES.has(code) || code.startsWith('08') || ['57P01', '57P02', '57P03', '53300'].includes(code)) return true;
  // node-postgres says these with no code: its words are all there is to go by (the library's, not ours).
  const message = String(e?.message ?? '');
  return /Connection terminated|timeout exceeded when trying to connect|Client has encountered a connection error|connection is not queryable|Client was closed/i.test(message);
}

/** MySQL/MariaDB: a socket error, a lost connection, a server shutting down or out of connections. */
export function mysqlUnavailable(err: unknown): boolean {
  const e = err as { code?: unknown; errno?: unknown; fatal?: unknown; message?: unknown } | null;
  const code = typeof e?.code === 'string' ? e.code : '';
  if (SOCKET_CODES.has(code)) return true;
  if (['PROTOCOL_CONNECTION_LOST', 'ER_SERVER_SHUTDOWN', 'ER_CON_COUNT_ERROR', 'PROTOCOL_SEQUENCE_TIMEOUT', 'ER_CONNECTION_KILLED'].includes(code)) return true;
  if (e?.errno === 1053 || e?.errno === 1040 || e?.errno === 1927 || e?.errno === 2006 || e?.errno === 2013) return true;
  // mysql2 says these with no code when a pooled connection was closed under it.
  const message = String(e?.message ?? '');
  return e?.fatal === true || /connection is in closed state|Can't add new command when connection is in closed state|Connection lost/i.test(message);
}
