/**
 * Production wiring of a server process: the one place that builds the real
 * datastore, agent, driver, logger and HTTP server, one wiring per role
 * (ROLES), starts listening and shuts everything down in order.
 */
import type { AddressInfo } from 'node:net';
import { pino, type Logger } from 'pino';
import { build as prettyStream } from 'pino-pretty';
import { Agent, AsyncWorkers, CallSpans, computeCapacity, MB, MemoryCpuTracker, readHost, selfInstance, socketDirs, type AsyncWorkersOptions, type Invoker, type SocketDirs } from '../agent/index.js';
import type { Config, NodeType } from '../config/index.js';
import { openSqlDatastore, type CallStore, type SqlDatastore } from '../datastore/index.js';
import { DockerDriver } from '../drivers/index.js';
import { Changes } from '../models/index.js';
import { InvokeHandler } from './invoke.js';
import { FnLookup } from './lookup.js';
import { CallRecorder, type CallRecorderOptions } from './records.js';
import { SyslogForwarder } from './syslog.js';
import { QueueIntake, QueueReconciler } from './detached.js';
import { RedisQueue, SqlQueue, type Queue, type RedisPersistence } from '../mq/index.js';
import { datastoreCheck, engineCheck, queueCheck, runnersCheck } from './probes.js';
import { buildServer, VERSION } from './server.js';
import { Metrics, startTracing, type HealthCheck, type Tracing } from '../telemetry/index.js';
import { readFileSync } from 'node:fs';
import * as grpc from '@grpc/grpc-js';
import { createPlacer, LbAgent, ManagedPool, PoolManagerClient, RemoteCallStore, RemoteLookup, RunnerClient, StaticPool, type RunnerPool } from '../lb/index.js';
import { RunnerServer } from '../runner/index.js';
import { CapacityBook, PoolManager, PoolManagerServer, PoolMetrics, PREDICTORS, RunnerStatus } from '../poolmanager/index.js';
import { createControlPlane } from '../poolmanager/planes/index.js';

export interface RunningServer {
  readonly port: number;
  readonly logger: Logger;
  readonly agent: Agent | undefined;
  /** A pure runner's gRPC port. */
  readonly grpcPort: number | undefined;
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
function createAgent(config: Config, logger: Logger, changes: Changes, spans: CallSpans | undefined, dirs: SocketDirs, overrides: Partial<Config['agent']> = {}): Agent {
  const a = { ...config.agent, ...overrides };
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
  return new Agent({ driver, resources: new MemoryCpuTracker(capacity), logger, changes, config: { ...a, instance: selfInstance() }, socketDirs: dirs, ...(spans ? { spans } : {}) });
}

/**
 * The local agent, reporting to the role's telemetry, started: its leftovers
 * removed. Without the Docker engine the node still serves (its API, its
 * probes) and calls fail until the engine answers.
 */
async function startAgent(config: Config, logger: Logger, changes: Changes, { metrics, tracing }: Telemetry, overrides: Partial<Config['agent']> = {}): Promise<Agent> {
  // Decided before the engine is asked anything: FN_IOFS_TMPFS=true that cannot be kept stops the server.
  const dirs = await socketDirs(config.agent.iofsTmpfs, config.agent.iofsPath, logger.child({ module: 'agent' }));
  const agent = createAgent(config, logger, changes, tracing ? new CallSpans(tracing.recorder) : undefined, dirs, overrides);
  if (metrics) {
    metrics.watchResources(agent.resources);
    agent.addListener(metrics);
  }
  try {
    await agent.start();
  } catch (err) {
    logger.warn({ err }, 'the Docker engine does not answer: calls fail until it does (start dockerd, or set DOCKER_HOST)');
  }
  return agent;
}

/** The call recorder of a role that keeps records (FNTS_CALL_RECORDS), writing to `store`; undefined when off. */
function recorderFor(config: Config, logger: Logger, store: CallRecorderOptions['store']): CallRecorder | undefined {
  if (!config.callRecords) return undefined;
  return new CallRecorder({ store, log: logger.child({ module: 'records' }), retentionMs: config.callRetentionMs, perFn: config.callRetentionPerFn });
}

/**
 * Detached calls: the intake that queues them, and workers that lease them
 * from the queue and run them through `invoker` while `resources` has async
 * room. Their records go to `store` (undefined: records are off) at once,
 * not batched, each with its attempt's log in the same write: the queue
 * lets go of a call only once its outcome is kept, and a record never says
 * a call ended before its log can be read.
 */
function detachedCalls(o: {
  readonly config: Config;
  readonly invoker: Invoker;
  readonly queue: Queue;
  readonly resources: AsyncWorkersOptions['resources'];
  readonly store: Pick<CallStore, 'insert'> | undefined;
  readonly instance: string;
  readonly logger: Logger;
  readonly metrics: Metrics | undefined;
}): { workers: AsyncWorkers; intake: QueueIntake } {
  const log = o.logger.child({ module: 'async' });
  const store = o.store;
  const workers = new AsyncWorkers({
    invoker: o.invoker,
    queue: o.queue,
    resources: o.resources,
    log,
    record: async (r, text) => {
      if (store) await store.insert([r], text === undefined ? [] : [{ callId: r.id, fnId: r.fn_id, appId: r.app_id, created: Date.parse(r.created_at), log: text }]);
    },
    instance: o.instance,
    maxRedeliveries: o.config.detached.maxRedeliveries,
    ...(o.metrics ? { events: o.metrics } : {}),
  });
  workers.start();
  return { workers, intake: new QueueIntake(o.queue, store, workers, log, o.config.detached.maxBodyBytes) };
}

/**
 * The reconciler of detached calls (detached.ts), on a role that sees both
 * the call records (`calls`: its datastore's) and the queue the calls wait in.
 */
function reconcilerFor(config: Config, logger: Logger, queue: Queue, calls: CallStore): QueueReconciler {
  const reconciler = new QueueReconciler({ queue, calls: config.callRecords ? calls : undefined, log: logger.child({ module: 'async' }), retentionMs: config.callRetentionMs });
  reconciler.start();
  return reconciler;
}

/**
 * A Redis queue must keep what it holds across a restart of Redis: the
 * server refuses to start on one that would not (no append-only file
 * fsynced at least every second), or whose settings it cannot read, unless
 * FNTS_MQ_ALLOW_VOLATILE=true, and says what to change.
 */
async function requireDurableRedis(queue: RedisQueue, config: Config, logger: Logger): Promise<void> {
  const where = `FN_MQ_URL=${config.mqUrl!.replace(/\/\/[^@/]*@/, '//***@')}`;
  let p: RedisPersistence;
  try {
    p = await queue.persistence();
  } catch (err) {
    throw new Error(`the Redis server at ${where} does not answer (${err instanceof Error ? err.message : String(err)}): start it, or fix FN_MQ_URL`, { cause: err });
  }
  if (p.kind === 'durable') {
    logger.info({ appendfsync: p.appendfsync }, 'the Redis queue keeps detached calls in its append-only file');
    return;
  }
  const why =
    p.kind === 'unknown'
      ? `the Redis server at ${where} refused CONFIG GET (${p.refusal}), so fnts cannot check that it keeps queued detached calls across a restart: make sure it runs with appendonly yes and appendfsync everysec (or always)`
      : `the Redis server at ${where} would lose queued detached calls when it restarts (appendonly ${p.appendonly || '?'}, appendfsync ${p.appendfsync || '?'}, save '${p.save}'): ` +
        'turn on its append-only file: appendonly yes with appendfsync everysec (in redis.conf, or CONFIG SET appendonly yes then CONFIG REWRITE)';
  if (!config.detached.allowVolatile) throw new Error(`${why}; or set FNTS_MQ_ALLOW_VOLATILE=true to start anyway and accept that`);
  logger.warn(`${why}; starting anyway (FNTS_MQ_ALLOW_VOLATILE=true): the records of calls lost that way are marked error`);
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
  /** Keeps the records of detached calls true to their queue; stopped before the queue closes. */
  readonly reconciler?: QueueReconciler;
  /** What the role needs besides the datastore to be ready (GET /ready). */
  readonly checks?: readonly HealthCheck[];
  /** A pure runner's gRPC server: drained (calls in flight finish, new ones refused) before the agent closes. */
  readonly runner?: RunnerServer;
  /** The gRPC port it listens on. */
  readonly grpcPort?: number;
  /** Stops what the role runs besides the above (the pool manager's loop and server); first in line at close. */
  readonly stop?: () => Promise<void>;
}

/** What a role reports to: metrics (unless FNTS_METRICS=off) and spans (when an OTLP endpoint is set). */
interface Telemetry {
  readonly metrics?: Metrics | undefined;
  readonly tracing?: Tracing | undefined;
}

type Wiring = (config: Config, logger: Logger, datastore: SqlDatastore, changes: Changes, queue: Queue, telemetry: Telemetry) => Promise<RoleParts>;

/**
 * One wiring per role (FN_NODE_TYPE). `full`: the API and the local agent
 * behind the invoke endpoints. `api`: the API only. `pure-runner`: the
 * agent behind Fn's gRPC runner protocol. `lb`: the invoke endpoints, calls
 * placed on runners. `poolmanager`: runner groups scaled through a control
 * plane for the LBs' advertised demand.
 */
const ROLES: Record<NodeType, Wiring> = {
  async full(config, logger, datastore, changes, queue, { metrics, tracing }) {
    const agent = await startAgent(config, logger, changes, { metrics, tracing });
    const recorder = recorderFor(config, logger, datastore.calls);
    if (recorder) agent.addListener(recorder);
    const syslog = new SyslogForwarder(logger.child({ module: 'syslog' }));
    agent.addListener(syslog);
    // Detached calls: the embedded queue in the same database, run by the agent's async workers.
    const { workers, intake: detached } = detachedCalls({
      config,
      invoker: agent,
      queue,
      resources: agent.resources,
      store: recorder ? datastore.calls : undefined,
      instance: agent.config.instance,
      logger,
      metrics,
    });
    const invoke = new InvokeHandler({ invoker: agent, detached, lookup: new FnLookup(datastore, changes), logger, maxRequestBytes: config.agent.maxRequestBytes });
    const reconciler = reconcilerFor(config, logger, queue, datastore.calls);
    // Calls need the engine: without it this node is up (the API works) but not ready for calls.
    return { invoke, invoker: agent, agent, syslog, workers, reconciler, checks: [engineCheck(agent.driver)], ...(recorder ? { recorder } : {}) };
  },
  async api(config, logger, datastore, _changes, queue) {
    // No calls run here, but LBs hand their records in: removed past their retention here.
    const recorder = recorderFor(config, logger, datastore.calls);
    // With the LBs' queue (FN_MQ_URL) this node sees both the records and the queue: it reconciles them.
    const reconciler = config.mqUrl ? reconcilerFor(config, logger, queue, datastore.calls) : undefined;
    return { ...(recorder ? { recorder } : {}), ...(reconciler ? { reconciler } : {}) };
  },
  /**
   * The agent behind Fn's gRPC RunnerProtocol. Its resources never block: a
   * call that would wait for memory is refused (503) so that the LB places
   * it on another runner, as Fn's pure runners do.
   */
  async 'pure-runner'(config, logger, _datastore, changes, _queue, { metrics, tracing }) {
    const agent = await startAgent(config, logger, changes, { metrics, tracing }, { nonBlockingResources: true });
    const syslog = new SyslogForwarder(logger.child({ module: 'syslog' }));
    agent.addListener(syslog);
    const tls = fleetTls(config);
    const runner = new RunnerServer({ invoker: agent, log: logger, maxRequestBytes: config.agent.maxRequestBytes, ...(tls ? { tls } : {}), ...(metrics ? { events: metrics } : {}) });
    let grpcPort: number;
    try {
      grpcPort = await runner.listen(config.listenHost, config.fleet.grpcPort);
    } catch (err) {
      await agent.close();
      throw err;
    }
    if (!tls) logger.warn({ grpcPort }, 'the runner protocol is plaintext: keep FN_GRPC_PORT on a private network, or set FNTS_GRPC_TLS_CERT, _KEY and _CA for mutual TLS');
    logger.info({ grpcPort }, `runner protocol serving on :${grpcPort}`);
    return { invoker: agent, agent, syslog, runner, grpcPort, checks: [engineCheck(agent.driver)] };
  },
  /**
   * The invoke endpoints, each call placed on a runner (FN_RUNNER_ADDRESSES,
   * or the runners a pool manager lists for the app's group: FN_NPM_ADDRESS)
   * by FN_PLACER; apps, fns and triggers come from the API node
   * (FN_RUNNER_API_URL), cached for FNTS_LB_CACHE_MSECS.
   */
  async lb(config, logger, _datastore, _changes, queue, { metrics }) {
    const { fleet } = config;
    const runnerTls = fleetTls(config);
    if (!runnerTls) logger.warn('the runner protocol is plaintext: keep the runners on a private network, or set FNTS_GRPC_TLS_CERT, _KEY and _CA for mutual TLS');
    const connect = (address: string): RunnerClient => new RunnerClient(address, { tls: runnerTls });
    let pool: RunnerPool;
    if (fleet.npmAddress !== undefined) {
      const managed = new ManagedPool({
        manager: new PoolManagerClient(fleet.npmAddress, clientCredentials(runnerTls)),
        connect,
        lbId: selfInstance(),
        log: logger.child({ module: 'pool' }),
        pollMs: fleet.npmPollMs,
        advertiseMs: fleet.npmAdvertiseMs,
      });
      managed.start();
      pool = managed;
    } else {
      pool = new StaticPool(fleet.runnerAddresses.map(connect));
    }
    // Records and logs of the calls placed here go to the API node, batched as a full node's.
    const store = new RemoteCallStore(fleet.runnerApiUrl!);
    const recorder = recorderFor(config, logger, store);
    const invoker = new LbAgent({
      pool,
      placer: createPlacer(fleet.placer),
      log: logger,
      ...(metrics ? { listeners: [metrics] } : {}),
      ...(recorder ? { callListeners: [recorder] } : {}),
    });
    metrics?.watchRunners(() => invoker.view);
    const lookup = new RemoteLookup({ apiUrl: fleet.runnerApiUrl!, ttlMs: fleet.lbCacheMs });
    // Detached calls need a queue every LB shares (FN_MQ_URL): the LBs' dispatchers place them like any call.
    let workers: AsyncWorkers | undefined;
    let detached: QueueIntake | undefined;
    if (config.mqUrl) {
      ({ workers, intake: detached } = detachedCalls({
        config,
        invoker,
        queue,
        // Runners refuse what they have no room for; the dispatcher tries again a moment later.
        resources: { waitAsyncCapacity: async () => undefined },
        store: recorder ? store : undefined,
        instance: selfInstance(),
        logger,
        metrics,
      }));
    } else {
      logger.warn('no FN_MQ_URL: detached calls (Fn-Invoke-Type: detached) run as synchronous calls on this LB; set FN_MQ_URL=redis://... (shared by the LBs and the API node) to queue them');
    }
    const invoke = new InvokeHandler({ invoker, lookup, logger, maxRequestBytes: config.agent.maxRequestBytes, ...(detached ? { detached } : {}) });
    logger.info({ ...(fleet.npmAddress !== undefined ? { npm: fleet.npmAddress } : { runners: fleet.runnerAddresses }), placer: fleet.placer, api: fleet.runnerApiUrl }, 'placing calls on runners');
    // Ready while a runner can be reached: a load balancer in front sends its callers elsewhere meanwhile.
    return { invoke, invoker, checks: [runnersCheck(pool)], ...(recorder ? { recorder } : {}), ...(workers ? { workers } : {}) };
  },
  /**
   * The pool manager: LBs advertise what each runner group needs
   * (NodePoolScaler) and ask for its runners (RunnerManager) on
   * FN_GRPC_PORT (9191); the groups are scaled through FNTS_CONTROL_PLANE.
   */
  async poolmanager(config, logger, _datastore, _changes, _queue, { metrics }) {
    const { pool } = config;
    const log = logger.child({ module: 'poolmanager' });
    // Runners get the settings that make them part of this fleet.
    const runnerEnv: Record<string, string> = { FN_LOG_LEVEL: config.logLevel, FN_LOG_FORMAT: config.logFormat, ...(config.agent.containerTag ? { FN_CONTAINER_LABEL_TAG: config.agent.containerTag } : {}) };
    const plane = createControlPlane(pool, runnerEnv, config.agent.containerTag);
    const book = new CapacityBook({ ttlMs: pool.requirementTtlMs });
    const status = new RunnerStatus(fleetTls(config));
    const events = metrics ? new PoolMetrics(metrics.registry, book) : undefined;
    const manager = new PoolManager({
      plane,
      book,
      predictor: PREDICTORS[pool.predictor],
      probe: status.probe,
      log,
      runnerMemMb: pool.runnerMemMb,
      minRunners: pool.minRunners,
      maxRunners: pool.maxRunners,
      maxProvisionPerTick: pool.maxProvisionPerTick,
      tickMs: pool.tickMs,
      leadMs: pool.runnerStartMs,
      drainGraceMs: pool.drainGraceMs,
      maxDrainMs: pool.maxDrainMs,
      startTimeoutMs: pool.startTimeoutMs,
      ...(events ? { events } : {}),
    });
    events?.watch(manager);
    const credentials = serverCredentials(config);
    const server = new PoolManagerServer({ manager, book, log, ...(credentials ? { credentials } : {}) });
    let grpcPort: number;
    try {
      grpcPort = await server.listen(config.listenHost, pool.grpcPort);
    } catch (err) {
      await plane.close();
      throw err;
    }
    manager.start();
    logger.info({ grpcPort, controlPlane: plane.kind, predictor: pool.predictor, runners: [pool.minRunners, pool.maxRunners] }, `pool manager serving on :${grpcPort}`);
    return {
      grpcPort,
      async stop() {
        await server.close();
        await manager.close();
        status.close();
        await plane.close();
      },
    };
  },
};

/** The fleet's mutual TLS files (FNTS_GRPC_TLS_CA, _KEY, _CERT), read; undefined: plaintext. */
function fleetTls(config: Config): { ca: Buffer; key: Buffer; cert: Buffer } | undefined {
  const tls = config.fleet.tls;
  return tls ? { ca: readFileSync(tls.ca), key: readFileSync(tls.key), cert: readFileSync(tls.cert) } : undefined;
}

/** Mutual TLS for a fleet role's gRPC server; undefined: plaintext. */
function serverCredentials(config: Config): grpc.ServerCredentials | undefined {
  const tls = fleetTls(config);
  return tls ? grpc.ServerCredentials.createSsl(tls.ca, [{ cert_chain: tls.cert, private_key: tls.key }], true) : undefined;
}

/** Mutual TLS for a fleet role's gRPC clients (`tls`: the files, already read); undefined: plaintext. */
function clientCredentials(tls: ReturnType<typeof fleetTls>): grpc.ChannelCredentials | undefined {
  return tls ? grpc.credentials.createSsl(tls.ca, tls.key, tls.cert) : undefined;
}

/**
 * Releases what a role holds, in order: no new detached calls are leased
 * while the calls in flight finish, then the last records are stored, the
 * log destinations and the queue closed, and the datastore last.
 */
async function release(parts: RoleParts, queue: Queue | undefined, datastore: SqlDatastore, tracing: Tracing | undefined): Promise<void> {
  await parts.stop?.();
  // A runner refuses new calls while those in flight finish; then its port closes.
  await parts.runner?.drain();
  await parts.runner?.close();
  await Promise.all([parts.workers?.close(), parts.invoker?.close(), parts.reconciler?.close()]);
  await Promise.all([parts.recorder?.close(), tracing?.shutdown()]);
  parts.syslog?.close();
  await queue?.close();
  await datastore.close();
}

export async function startServer(config: Config, logger: Logger = createLogger(config)): Promise<RunningServer> {
  // LBs and runners keep nothing: their datastore (for the queue's table, unused) lives in memory.
  const fleet = config.nodeType === 'lb' || config.nodeType === 'pure-runner' || config.nodeType === 'poolmanager';
  const datastore = await openSqlDatastore(fleet ? 'sqlite3://:memory:' : config.dbUrl);
  const changes = new Changes(logger);
  let parts: RoleParts = {};
  let queue: Queue | undefined;
  let tracing: Tracing | undefined;
  let app;
  try {
    // The queue of detached calls: in the database, or Redis for a fleet; every role sees it (an api node redrives).
    if (config.mqUrl) {
      const redis = new RedisQueue(config.mqUrl);
      queue = redis;
      await requireDurableRedis(redis, config, logger);
    } else queue = new SqlQueue(() => datastore.database());
    const metrics = config.metrics ? new Metrics({ role: config.nodeType, version: VERSION, queue }) : undefined;
    tracing = config.otlpTracesUrl ? startTracing({ url: config.otlpTracesUrl, protocol: config.otlpProtocol, serviceName: config.otelServiceName, version: VERSION, role: config.nodeType, sampler: config.otelSampler, log: logger }) : undefined;
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
      api: !fleet,
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
  logger.info({ port, role: config.nodeType, ...(fleet ? {} : { db: config.dbUrl.replace(/\/\/[^@/]*@/, '//***@') }) }, `fnts serving on :${port}`);

  let closing: Promise<void> | undefined;
  const server = app;
  return {
    port,
    logger,
    agent: parts.agent,
    grpcPort: parts.grpcPort,
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
