/**
 * Production wiring of a server process: the one place that builds the real
 * datastore, logger and HTTP server for a role, starts listening and shuts
 * everything down in order.
 */
import type { AddressInfo } from 'node:net';
import { pino, type Logger } from 'pino';
import type { Config } from '../config/index.js';
import { openSqlDatastore, type Datastore } from '../datastore/index.js';
import { buildServer } from './server.js';

export interface RunningServer {
  readonly port: number;
  readonly logger: Logger;
  /** Stops accepting, lets in-flight requests finish, closes the datastore. Idempotent. */
  close(): Promise<void>;
}

export function createLogger(config: Config): Logger {
  return pino({ level: config.logLevel, base: { svc: 'fnts' } });
}

export async function startServer(config: Config, logger: Logger = createLogger(config)): Promise<RunningServer> {
  const datastore: Datastore = await openSqlDatastore(config.dbUrl);
  let app;
  try {
    app = await buildServer({ config, datastore, logger });
    await app.listen({ port: config.port, host: config.listenHost });
  } catch (err) {
    await app?.close();
    await datastore.close();
    throw err;
  }
  const port = (app.server.address() as AddressInfo).port;
  logger.info({ port, role: config.nodeType, db: config.dbUrl.replace(/\/\/[^@/]*@/, '//***@') }, `fnts serving on :${port}`);

  let closing: Promise<void> | undefined;
  const server = app;
  return {
    port,
    logger,
    close() {
      closing ??= (async () => {
        await server.close();
        await datastore.close();
        logger.info('fnts stopped');
      })();
      return closing;
    },
  };
}
