/**
 * Starts a server process in its role (FN_NODE_TYPE): the role's
 * composition root makes what the role uses, an HTTP server serves it (the
 * REST API where the role keeps a database, the invoke endpoints where it
 * runs or places calls, probes and metrics everywhere), and close() releases
 * it all in order.
 */
import type { AddressInfo } from 'node:net';
import type { Logger } from 'pino';
import type { Agent } from '../agent/index.js';
import type { Config, NodeType } from '../config/index.js';
import type { SqlDatastore } from '../datastore/index.js';
import { buildServer, datastoreCheck, queueCheck, VERSION } from '../server/index.js';
import { Metrics, startTracing, type Tracing } from '../telemetry/index.js';
import { api } from './api.js';
import { createLogger } from './common.js';
import { full } from './full.js';
import { lb } from './lb.js';
import { release, type Building, type Role } from './parts.js';
import { poolmanager } from './poolmanager.js';
import { pureRunner } from './pure-runner.js';

/** One composition root per role. */
const ROLES: Record<NodeType, Role> = { full, api, lb, 'pure-runner': pureRunner, poolmanager };

export interface RunningServer {
  readonly port: number;
  readonly logger: Logger;
  readonly agent: Agent | undefined;
  /** A pure runner's or pool manager's gRPC port. */
  readonly grpcPort: number | undefined;
  /** The datastore it serves from (full and api nodes; GET /ready asks it, and closing it makes the server not ready). */
  readonly datastore: SqlDatastore | undefined;
  /**
   * Stops accepting, lets in-flight requests finish, removes every container
   * this server started, closes the datastore. Idempotent.
   */
  close(): Promise<void>;
  /**
   * Cuts calls in flight (they answer 503) and container starts, so that
   * close() completes without waiting for functions. Call it during or
   * before close().
   */
  abort(): void;
}

export async function startServer(config: Config, logger: Logger = createLogger(config)): Promise<RunningServer> {
  const made: Building = {};
  let tracing: Tracing | undefined;
  let app;
  try {
    const metrics = config.metrics ? new Metrics({ role: config.nodeType, version: VERSION }) : undefined;
    tracing = config.otlpTracesUrl
      ? startTracing({
          url: config.otlpTracesUrl,
          protocol: config.otlpProtocol,
          serviceName: config.otelServiceName,
          version: VERSION,
          role: config.nodeType,
          sampler: config.otelSampler,
          log: logger,
        })
      : undefined;
    if (tracing) logger.info({ url: config.otlpTracesUrl }, 'tracing on: spans go to the OTLP endpoint');
    await ROLES[config.nodeType]({ config, logger, metrics, tracing }, made);
    const { datastore, queue } = made;
    // An embedded queue lives in the datastore; Redis is a dependency of its own.
    const checks = [...(datastore ? [datastoreCheck(datastore)] : []), ...(queue && config.mqUrl ? [queueCheck(queue)] : []), ...(made.checks ?? [])];
    app = await buildServer({
      config,
      logger,
      checks,
      ...(made.api && datastore
        ? {
            api: {
              datastore,
              calls: datastore.calls,
              ...(made.changes ? { changes: made.changes } : {}),
              ...(queue ? { queue } : {}),
              ...(made.secrets ? { secrets: made.secrets } : {}),
              ...(made.tokens ? { tokens: made.tokens } : {}),
            },
          }
        : {}),
      ...(made.invoke ? { invoke: made.invoke } : {}),
      ...(metrics ? { metrics } : {}),
    });
    await app.listen({ port: config.port, host: config.listenHost });
  } catch (err) {
    await app?.close();
    await release(made, tracing);
    throw err;
  }
  const parts = made;
  parts.listening?.();
  const port = (app.server.address() as AddressInfo).port;
  logger.info({ port, role: config.nodeType, ...(parts.datastore ? { db: config.db.shown } : {}) }, `fnts serving on :${port}`);

  let closing: Promise<void> | undefined;
  const server = app;
  return {
    port,
    logger,
    agent: parts.agent,
    grpcPort: parts.grpcPort,
    datastore: parts.datastore,
    abort() {
      parts.invoker?.abort();
    },
    close() {
      closing ??= (async () => {
        // Connections that go idle after an in-flight answer would otherwise
        // keep the server open until their keep-alive timeout.
        const sweep = setInterval(() => server.server.closeIdleConnections(), 50);
        try {
          await server.close();
        } finally {
          clearInterval(sweep);
        }
        await release(parts, tracing);
        logger.info('fnts stopped');
      })();
      return closing;
    },
  };
}
