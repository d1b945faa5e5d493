/**
 * MySQL: statements sent several to a round trip. MySQL has no UPDATE ...
 * RETURNING and no data-modifying CTE, so the queue's lease is a
 * transaction of its own (the isolation it needs, BEGIN, the pick, the
 * UPDATE, COMMIT): five round trips through Kysely, each a write to the
 * socket and a wake-up of the database, where Postgres' is one statement.
 * Sent in batches (MySQL's multi-statement queries), it is two: what can be
 * decided before the pick's rows are read, then the UPDATE and COMMIT.
 *
 * Batches go over a small pool of their own, the only connections with
 * multipleStatements on: every statement sent here is the queue's own text
 * with its values bound by the driver (escaped, never spliced), and the
 * datastore's pool stays one statement a query.
 */
import { createPool, type Pool, type PoolConnection, type PoolOptions } from 'mysql2';
import { guard, mysqlUnavailable } from './guard.js';

/** One statement of a batch: SQL text with `?` for each of its values, in order. */
export interface Statement {
  readonly text: string;
  readonly values: readonly unknown[];
}

/** What each statement of a batch answered: its rows (a SELECT), or how many rows it changed. */
export type StatementResult = Array<Record<string, unknown>> | { readonly affectedRows: number };

/** Sends statements in batches, on one connection at a time. */
export interface StatementBatches {
  /**
   * Runs `work` on one connection; each `send` is one round trip, its
   * statements run in order, and it answers each one's result (the first
   * failing statement rejects it, the rest not run). `work` ends any
   * transaction it begins; if it throws, what it began is rolled back (or,
   * where that fails, the connection closed, which ends it). A database that
   * does not answer rejects with DatabaseUnavailableError.
   */
  session<T>(work: (send: (statements: readonly Statement[]) => Promise<StatementResult[]>) => Promise<T>): Promise<T>;
  /** Closes the connections (once: the datastore's close). */
  close(): Promise<void>;
}

/** Connections of the batches' pool: the queue's leases under way at once (three while a backlog lasts) and its acknowledgements. */
export const BATCH_POOL_SIZE = 4;

/** Batches over a pool of `options` (the datastore's connection options, BATCH_POOL_SIZE connections), told to `onUnavailable` as the datastore's queries are. */
export function mysqlStatementBatches(options: PoolOptions, onUnavailable?: (err: unknown) => void): StatementBatches {
  const pool: Pool = createPool({ ...options, connectionLimit: BATCH_POOL_SIZE, multipleStatements: true });
  // A connection that breaks fails its batch (503); its error event must not end the process.
  pool.on('connection', (connection) => connection.on('error', () => undefined));
  const check = guard({ isUnavailable: mysqlUnavailable, onUnavailable });
  const connection = (): Promise<PoolConnection> => new Promise((resolve, reject) => pool.getConnection((err, conn) => (err ? reject(err) : resolve(conn))));
  const query = (conn: PoolConnection, statements: readonly Statement[]): Promise<StatementResult[]> =>
    new Promise((resolve, reject) => {
      const text = statements.map((s) => s.text).join(';\n');
      conn.query({ sql: text, values: statements.flatMap((s) => s.values) }, (err, result) => {
        if (err) return reject(err);
        // One statement answers its result alone; several, one result each.
        resolve(statements.length === 1 ? [result as StatementResult] : (result as StatementResult[]));
      });
    });
  return {
    async session(work) {
      const conn = await check(connection);
      let result;
      try {
        result = await work((statements) => check(() => query(conn, statements)));
      } catch (err) {
        // What `work` began is rolled back at once (its row locks released for the other servers' leases);
        // a connection that cannot say so is closed, which ends its transaction too, later.
        const rolledBack = await new Promise<boolean>((resolve) => conn.query('rollback', (e) => resolve(!e)));
        if (rolledBack) conn.release();
        else conn.destroy();
        throw err;
      }
      conn.release();
      return result;
    },
    close: () => new Promise<void>((resolve) => pool.end(() => resolve())),
  };
}
