/**
 * Production wiring of a server process: the one place that builds the real
 * datastore, agent, driver, logger and HTTP server, one wiring per role
 * (ROLES), starts listening and shuts everything down in order.
 */
import type { AddressInfo } from 'node:net';
import { pino, type Logger } from 'pino';
import { build as prettyStream } from 'pino-pretty';
import { Agent, AsyncWorkers, CallSpans, computeCapacity, MB, MemoryCpuTracker, readHost, selfInstance, type Invoker } from '../agent/index.js';
import type { Config, NodeType } from '../config/index.js';
import { openSqlDatastore, type SqlDatastore } from '../datastore/index.js';
import { DockerDriver } from '../drivers/index.js';
import { Changes } from '../models/index.js';
import { InvokeHandler } from './invoke.js';
import { FnLookup } from './lookup.js';
import { CallRecorder } from './records.js';
import { SyslogForwarder } from './syslog.js';
import { QueueIntake } from './detached.js';
import { RedisQueue, SqlQueue, type Queue } from '../mq/index.js';
import { datastoreCheck, engineCheck, queueCheck } from './probes.js';
import { buildServer, VERSION } from './server.js';
import { Metrics, startTracing, type HealthCheck, type Tracing } from '../telemetry/index.js';

export interface RunningServer {
  readonly port: number;
  readonly logger: Logger;
  readonly agent: Agent | undefined;
  /** The datastore it serves from (GET /ready asks it; closing it makes the server not ready). */
  readonly datastore: SqlDatastore;
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

/**
 * The server's logger, on stdout: JSON lines (FN_LOG_FORMAT=json) for log
 * collectors, or text lines for people (text). Text is written
 * synchronously, like pino's own JSON, so that the last lines before an
 * exit are not lost; colours only on a terminal, so that a file or a
 * collector gets plain text.
 */
export function createLogger(config: Config): Logger {
  const options = { level: config.logLevel, base: { svc: 'fnts' } };
  if (config.logFormat === 'json') return pino(options);
  return pino(options, prettyStream({ sync: true, colorize: process.stdout.isTTY === true, singleLine: true, ignore: 'pid,hostname,svc', translateTime: 'SYS:standard' }));
}

/** The local agent with its Docker driver and resource tracker, as a full node (and later a pure runner) runs it. */
function createAgent(config: Config, logger: Logger, changes: Changes, spans: CallSpans | undefined): Agent {
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
  return new Agent({ driver, resources: new MemoryCpuTracker(capacity), logger, changes, config: { ...a, instance: selfInstance() }, ...(spans ? { spans } : {}) });
}

/** What a role runs besides the API: the invoke endpoints and what serves them, if any. */
interface RoleParts {
  readonly invoke?: InvokeHandler;
  /** Cuts calls in flight (abort) and releases everything (close). */
  readonly invoker?: Invoker;
  readonly agent?: Agent;
  /** Keeps call records and logs; closed after the invoker, so the last calls are stored. */
  readonly recorder?: CallRecorder;
  /** Sends function logs to apps' syslog_url; closed after the invoker. */
  readonly syslog?: SyslogForwarder;
  /** Run detached calls from the queue; stop leasing first, their calls end with the invoker's. */
  readonly workers?: AsyncWorkers;
  /** What the role needs besides the datastore to be ready (GET /ready). */
  readonly checks?: readonly HealthCheck[];
}

/** What a role reports to: metrics (unless FNTS_METRICS=off) and spans (when an OTLP endpoint is set). */
interface Telemetry {
  readonly metrics?: Metrics | undefined;
  readonly tracing?: Tracing | undefined;
}

type Wiring = (config: Config, logger: Logger, datastore: SqlDatastore, changes: Changes, queue: Queue, telemetry: Telemetry) => Promise<RoleParts>;

/**
 * One wiring per role (FN_NODE_TYPE). `full`: the API and the local agent
 * behind the invoke endpoints. `api`: the API only. (`lb`, `pure-runner`
 * and `poolmanager` join here as they arrive.)
 */
const ROLES: Record<NodeType, Wiring> = {
  async full(config, logger, datastore, changes, queue, { metrics, tracing }) {
    const agent = createAgent(config, logger, changes, tracing ? new CallSpans(tracing.tracer) : undefined);
    if (metrics) {
      metrics.watchResources(agent.resources);
      agent.addListener(metrics);
    }
    try {
      await agent.start();
    } catch (err) {
      logger.warn({ err }, 'the Docker engine does not answer: the API works, but calls fail until it does (start dockerd, or set DOCKER_HOST)');
    }
    let recorder: CallRecorder | undefined;
    if (config.callRecords) {
      recorder = new CallRecorder({ store: datastore.calls, log: logger.child({ module: 'records' }), retentionMs: config.callRetentionMs, perFn: config.callRetentionPerFn });
      agent.addListener(recorder);
    }
    const syslog = new SyslogForwarder(logger.child({ module: 'syslog' }));
    agent.addListener(syslog);
    // Detached calls: the embedded queue in the same database, run by the agent's async workers.
    const workers = new AsyncWorkers({
      invoker: agent,
      queue,
      resources: agent.resources,
      log: logger.child({ module: 'async' }),
      // Stored at once (not batched): the queue lets go of a call only once its outcome is kept.
      record: async (r) => {
        if (recorder) await datastore.calls.insert([r]);
      },
      instance: agent.config.instance,
      ...(metrics ? { events: metrics } : {}),
    });
    workers.start();
    const detached = new QueueIntake(queue, recorder ? datastore.calls : undefined, workers, logger.child({ module: 'async' }));
    const invoke = new InvokeHandler({ invoker: agent, detached, lookup: new FnLookup(datastore, changes), logger, maxRequestBytes: config.agent.maxRequestBytes });
    // Calls need the engine: without it this node is up (the API works) but not ready for calls.
    return { invoke, invoker: agent, agent, syslog, workers, checks: [engineCheck(agent.driver)], ...(recorder ? { recorder } : {}) };
  },
  async api() {
    return {};
  },
};

/**
 * Releases what a role holds, in order: no new detached calls are leased
 * while the calls in flight finish, then the last records are stored, the
 * log destinations and the queue closed, and the datastore last.
 */
async function release(parts: RoleParts, queue: Queue | undefined, datastore: SqlDatastore, tracing: Tracing | undefined): Promise<void> {
  await Promise.all([parts.workers?.close(), parts.invoker?.close()]);
  await Promise.all([parts.recorder?.close(), tracing?.shutdown()]);
  parts.syslog?.close();
  await queue?.close();
  await datastore.close();
}

export async function startServer(config: Config, logger: Logger = createLogger(config)): Promise<RunningServer> {
  const datastore = await openSqlDatastore(config.dbUrl);
  const changes = new Changes(logger);
  let parts: RoleParts = {};
  let queue: Queue | undefined;
  let tracing: Tracing | undefined;
  let app;
  try {
    // The queue of detached calls: in the database, or Redis for a fleet; every role sees it (an api node redrives).
    queue = config.mqUrl ? new RedisQueue(config.mqUrl) : new SqlQueue(() => datastore.database());
    const metrics = config.metrics ? new Metrics({ role: config.nodeType, version: VERSION, queue }) : undefined;
    tracing = config.otlpTracesUrl ? startTracing({ url: config.otlpTracesUrl, serviceName: config.otelServiceName, version: VERSION, role: config.nodeType, sampler: config.otelSampler }) : undefined;
    if (tracing) logger.info({ url: config.otlpTracesUrl }, 'tracing on: spans go to the OTLP endpoint');
    parts = await ROLES[config.nodeType](config, logger, datastore, changes, queue, { metrics, tracing });
    // The embedded queue lives in the datastore; Redis is a dependency of its own.
    const checks = [datastoreCheck(datastore), ...(config.mqUrl ? [queueCheck(queue)] : []), ...(parts.checks ?? [])];
    app = await buildServer({
      config,
      datastore,
      logger,
      changes,
      calls: datastore.calls,
      queue,
      checks,
      ...(parts.invoke ? { invoke: parts.invoke } : {}),
      ...(metrics ? { metrics } : {}),
    });
    await app.listen({ port: config.port, host: config.listenHost });
  } catch (err) {
    await app?.close();
    await release(parts, queue, datastore, tracing);
    throw err;
  }
  const port = (app.server.address() as AddressInfo).port;
  logger.info({ port, role: config.nodeType, db: config.dbUrl.replace(/\/\/[^@/]*@/, '//***@') }, `fnts serving on :${port}`);

  let closing: Promise<void> | undefined;
  const server = app;
  return {
    port,
    logger,
    agent: parts.agent,
    datastore,
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
        await release(parts, queue, datastore, tracing);
        logger.info('fnts stopped');
      })();
      return closing;
    },
  };
}
