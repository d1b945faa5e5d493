/**
 * Pieces several roles wire the same way: the logger, the local agent, the
 * call recorder, detached calls (intake, workers, reconciler), the Redis
 * queue's durability check, the fleet's TLS files.
 */
import { readFileSync } from 'node:fs';
import { pino, type Logger } from 'pino';
import { build as prettyStream } from 'pino-pretty';
import { Agent, AsyncWorkers, CallSpans, computeCapacity, instanceAlive, MB, MemoryCpuTracker, readHost, selfInstance, socketDirs, type AsyncWorkersOptions } from '../agent/index.js';
import type { Invoker } from '../call/index.js';
import type { Config } from '../config/index.js';
import type { CallStore } from '../datastore/index.js';
import { DockerDriver, FunctionNetwork } from '../drivers/index.js';
import type { Changes } from '../models/index.js';
import { RedisQueue, type Queue, type RedisPersistence } from '../mq/index.js';
import { CallRecorder, QueueIntake, QueueReconciler, type CallRecorderOptions } from '../server/index.js';
import type { Metrics } from '../telemetry/index.js';
import type { RoleContext } from './parts.js';

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

/**
 * The network functions join (FNTS_FUNCTION_NETWORK, FN_DOCKER_NETWORKS;
 * drivers/docker/network.ts), made when its start() is called (the roles
 * call it once the server listens: a start does not wait for it), or when
 * the first container or readiness probe needs it. Closed by the driver it
 * is given to, or by its maker.
 */
export function functionNetwork(config: Config, logger: Logger, instance: string): FunctionNetwork {
  const a = config.agent;
  return new FunctionNetwork({
    mode: a.functionNetwork,
    operatorNetworks: a.dockerNetworks,
    name: a.functionNetworkName,
    block: a.functionNetworkBlock,
    instance,
    isAlive: instanceAlive,
    log: logger.child({ module: 'network' }),
  });
}

/**
 * The local agent (full and pure-runner nodes) with its Docker driver,
 * functions' network and resource tracker, reporting to the role's
 * telemetry, started: its leftovers removed. Without the Docker engine the
 * node still serves (its API, its probes) and calls fail until the engine
 * answers.
 */
export async function startAgent(
  { config, logger, metrics, tracing }: RoleContext,
  changes: Changes | undefined,
  overrides: Partial<Config['agent']> = {},
): Promise<{ agent: Agent; network: FunctionNetwork }> {
  const a = { ...config.agent, ...overrides };
  // Decided before the engine is asked anything: FN_IOFS_TMPFS=true that cannot be kept stops the server.
  const dirs = await socketDirs(a.iofsTmpfs, a.iofsPath, logger.child({ module: 'agent' }));
  const capacity = computeCapacity(readHost(), a.maxTotalMemoryBytes, a.maxTotalCpuMillis);
  logger.info({ memoryMB: Math.floor(capacity.memoryBytes / MB), cpuMillis: capacity.cpuMillis }, 'capacity for functions');
  const instance = selfInstance();
  const network = functionNetwork(config, logger, instance);
  const driver = new DockerDriver({
    pullTimeoutMs: a.hotPullTimeoutMs,
    maxPids: a.maxPids,
    maxOpenFiles: a.maxOpenFiles,
    readOnlyRootfs: a.readOnlyRootfs,
    unprivileged: a.unprivileged,
    network,
  });
  const agent = new Agent({
    driver,
    resources: new MemoryCpuTracker(capacity),
    logger,
    config: { ...a, instance },
    socketDirs: dirs,
    ...(changes ? { changes } : {}),
    ...(tracing ? { spans: new CallSpans(tracing.recorder) } : {}),
  });
  if (metrics) {
    metrics.watchResources(agent.resources);
    agent.addListener(metrics);
  }
  try {
    await agent.start();
  } catch (err) {
    logger.warn({ err }, 'the Docker engine does not answer: calls fail until it does (start dockerd, or set DOCKER_HOST)');
  }
  return { agent, network };
}

/** The call recorder of a role that keeps records (FNTS_CALL_RECORDS), writing to `store`; undefined when off. */
export function recorderFor(config: Config, logger: Logger, store: CallRecorderOptions['store']): CallRecorder | undefined {
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
export function detachedCalls(o: {
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
 * The reconciler of detached calls (server/detached.ts), on a role that
 * sees both the call records (`calls`: its datastore's) and the queue the
 * calls wait in.
 */
export function reconcilerFor(config: Config, logger: Logger, queue: Queue, calls: CallStore): QueueReconciler {
  const reconciler = new QueueReconciler({ queue, calls: config.callRecords ? calls : undefined, log: logger.child({ module: 'async' }), retentionMs: config.callRetentionMs });
  reconciler.start();
  return reconciler;
}

/**
 * The Redis queue FN_MQ_URL names, once it is known to keep what it holds
 * across a restart of Redis: the server refuses to start on one that would
 * not (no append-only file fsynced at least every second), or whose
 * settings it cannot read, unless FNTS_MQ_ALLOW_VOLATILE=true, and says what
 * to change.
 */
export async function durableRedis(config: Config, logger: Logger): Promise<RedisQueue> {
  const queue = new RedisQueue(config.mqUrl!);
  try {
    await requireDurable(queue, config, logger);
    return queue;
  } catch (err) {
    await queue.close();
    throw err;
  }
}

async function requireDurable(queue: RedisQueue, config: Config, logger: Logger): Promise<void> {
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

/** The fleet's mutual TLS files (FNTS_GRPC_TLS_CA, _KEY, _CERT), read, for its gRPC servers and channels alike; undefined: plaintext. */
export function fleetTls(config: Config): { ca: Buffer; key: Buffer; cert: Buffer } | undefined {
  const tls = config.fleet.tls;
  return tls ? { ca: readFileSync(tls.ca), key: readFileSync(tls.key), cert: readFileSync(tls.cert) } : undefined;
}
