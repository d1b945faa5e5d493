/**
 * Production wiring of a server process: the one place that builds the real
 * datastore, agent, driver, logger and HTTP server for a role, starts
 * listening and shuts everything down in order.
 */
import type { AddressInfo } from 'node:net';
import { pino, type Logger } from 'pino';
import { Agent, computeCapacity, MB, MemoryCpuTracker, readHost, selfInstance } from '../agent/index.js';
import type { Config } from '../config/index.js';
import { openSqlDatastore, type Datastore } from '../datastore/index.js';
import { DockerDriver } from '../drivers/index.js';
import { InvokeHandler } from './invoke.js';
import { buildServer } from './server.js';

export interface RunningServer {
  readonly port: number;
  readonly logger: Logger;
  readonly agent: Agent | undefined;
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

export function createLogger(config: Config): Logger {
  return pino({ level: config.logLevel, base: { svc: 'fnts' } });
}

function createAgent(config: Config, logger: Logger): Agent {
  const a = config.agent;
  const capacity = computeCapacity(readHost(), a.maxTotalMemoryBytes, a.maxTotalCpuMillis);
  logger.info({ memoryMB: Math.floor(capacity.memoryBytes / MB), cpuMillis: capacity.cpuMillis }, 'capacity for functions');
  const driver = new DockerDriver({
    pullTimeoutMs: a.hotPullTimeoutMs,
    maxPids: a.maxPids,
    maxOpenFiles: a.maxOpenFiles,
    readOnlyRootfs: a.readOnlyRootfs,
    unprivileged: a.unprivileged,
    networks: a.dockerNetworks,
  });
  return new Agent({
    driver,
    resources: new MemoryCpuTracker(capacity),
    logger,
    config: {
      freezeIdleMs: a.freezeIdleMs,
      ejectIdleMs: a.ejectIdleMs,
      hotPollMs: a.hotPollMs,
      hotStartTimeoutMs: a.hotStartTimeoutMs,
      maxResponseBytes: a.maxResponseBytes,
      iofsRoot: a.iofsPath,
      owner: a.owner,
      instance: selfInstance(),
      containerTag: a.containerTag,
      nonBlockingResources: a.nonBlockingResources,
      launchPolicy: a.launchPolicy,
      statsIntervalMs: a.statsIntervalMs,
    },
  });
}

export async function startServer(config: Config, logger: Logger = createLogger(config)): Promise<RunningServer> {
  const datastore: Datastore = await openSqlDatastore(config.dbUrl);
  let agent: Agent | undefined;
  let app;
  try {
    let invoke: InvokeHandler | undefined;
    if (config.nodeType === 'full') {
      agent = createAgent(config, logger);
      try {
        await agent.start();
      } catch (err) {
        logger.warn({ err }, 'the Docker engine does not answer: the API works, but calls fail until it does (start dockerd, or set DOCKER_HOST)');
      }
      invoke = new InvokeHandler({ agent, datastore, logger, maxRequestBytes: config.agent.maxRequestBytes });
    }
    app = await buildServer({ config, datastore, logger, ...(invoke ? { invoke } : {}) });
    await app.listen({ port: config.port, host: config.listenHost });
  } catch (err) {
    await app?.close();
    await agent?.close();
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
    agent,
    abort() {
      agent?.abort();
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
        await agent?.close();
        await datastore.close();
        logger.info('fnts stopped');
      })();
      return closing;
    },
  };
}
