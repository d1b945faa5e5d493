/**
 * Pieces several roles wire the same way: the logger, the local agent, the
 * call recorder, detached calls (intake, workers, reconciler), the Redis
 * queue's durability check, the fleet's TLS files.
 */
import { readFileSync } from 'node:fs';
import { destination, pino, type Logger } from 'pino';
import { prettyFactory } from 'pino-pretty';
import {
  Agent,
  AsyncWorkers,
  CallSpans,
  computeCapacity,
  instanceAlive,
  MB,
  MemoryCpuTracker,
  readHost,
  secretFolders,
  selfInstance,
  socketDirs,
  type AsyncWorkersOptions,
  type HistogramStore,
  type SecretSource,
} from '../agent/index.js';
import { ensureAdminToken, TokenRegistry } from '../auth/index.js';
import type { Invoker } from '../call/index.js';
import { ConfigError, type Config } from '../config/index.js';
import {
  DatabaseUnavailableError,
  loadSecretKey,
  openSqlDatastore,
  failsEveryWrite,
  GroupCommit,
  SecretBox,
  SqlSecretStore,
  type CallLogEntry,
  type CallStore,
  type SqlDatastore,
  type TokenStore,
} from '../datastore/index.js';
import { DockerDriver, FunctionNetwork } from '../drivers/index.js';
import { isLoopbackHost, type CallRecord, type Changes } from '../models/index.js';
import { RedisQueue, type Queue, type RedisPersistence } from '../mq/index.js';
import { CallRecorder, QueueIntake, QueueReconciler, type CallRecorderOptions } from '../server/index.js';
import type { Metrics } from '../telemetry/index.js';
import type { Building, RoleContext } from './parts.js';

/**
 * The server's logger, on stdout (`fd`): JSON lines (FN_LOG_FORMAT=json)
 * for log collectors, or text lines for people (text). Either is written
 * in the logging call itself, text formatted there too (no chain of
 * streams in between), so that the last lines before an exit are not
 * lost; colours only on a terminal, so that a file or a collector gets
 * plain text.
 */
export function createLogger(config: Config, fd = 1): Logger {
  const options = { level: config.logLevel, base: { svc: 'fnts' } };
  const out = destination({ dest: fd, sync: true });
  if (config.logFormat === 'json') return pino(options, out);
  const text = prettyFactory({ colorize: fd === 1 && process.stdout.isTTY === true, singleLine: true, ignore: 'pid,hostname,svc', translateTime: 'SYS:standard' });
  return pino(options, { write: (line: string) => out.write(text(line)) });
}

/** How often, at most, the server says that the database does not answer (every failed query would say it). */
const UNAVAILABLE_LOG_EVERY_MS = 5000;

/**
 * The database FN_DB_URL names, its schema brought up to date. A database
 * server that does not answer at start is waited for (up to a minute, then
 * the start fails saying so); once started, while it does not answer,
 * requests that need it answer 503 and the log says so (at most every
 * 5 s); the pool reconnects by itself.
 */
export async function openDatabase(config: Config, logger: Logger): Promise<SqlDatastore> {
  const log = logger.child({ module: 'datastore' });
  let saidAt = -Infinity;
  const options = {
    poolSize: config.dbPoolSize,
    onUnavailable: (err: unknown) => {
      if (Date.now() - saidAt < UNAVAILABLE_LOG_EVERY_MS) return;
      saidAt = Date.now();
      log.warn({ db: config.db.shown, err: err instanceof Error ? err.message : String(err) }, 'the database does not answer: requests that need it answer 503 until it does');
    },
  };
  // A database server that does not answer yet (started together with this node, restarting): waited for, with backoff.
  const giveUpAt = Date.now() + START_WAIT_MS;
  for (let delay = 250; ; delay = Math.min(delay * 2, 5000)) {
    try {
      const datastore = await openSqlDatastore(config.db, options);
      log.info({ db: datastore.shown, kind: datastore.kind }, 'database schema up to date');
      return datastore;
    } catch (err) {
      const unavailable = causes(err).find((e) => e instanceof DatabaseUnavailableError);
      if (!unavailable) throw err;
      const why = causes(unavailable).at(-1);
      const reason = why instanceof Error ? why.message : String(why);
      if (Date.now() + delay > giveUpAt) {
        throw new Error(`the database ${config.db.shown} did not answer within ${START_WAIT_MS / 1000} s (${reason}): start it, or fix FN_DB_URL`, { cause: err });
      }
      log.warn({ db: config.db.shown, err: reason }, `waiting for the database ${config.db.shown} to answer`);
      await new Promise((r) => setTimeout(r, delay));
    }
  }
}

/** How long a node waits at start for its database server to answer. */
const START_WAIT_MS = 60_000;

/** An error and its causes, outermost first. */
function causes(err: unknown): unknown[] {
  const chain: unknown[] = [];
  for (let e: unknown = err; e !== undefined && chain.length < 10; e = (e as { cause?: unknown } | null)?.cause) chain.push(e);
  return chain;
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
  /** Where fns' secrets come from: containers get them as files (a role with the database); none: no /run/secrets. */
  secrets?: SecretSource,
  /** Where the keep-alive histograms survive restarts (a role with the database); none: learned again after each. */
  histograms?: HistogramStore,
): Promise<{ agent: Agent; network: FunctionNetwork }> {
  const a = { ...config.agent, ...overrides };
  const log = logger.child({ module: 'agent' });
  // Decided before the engine is asked anything: FN_IOFS_TMPFS=true that cannot be kept stops the server.
  const dirs = await socketDirs(a.iofsTmpfs, a.iofsPath, log);
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
    ...(secrets ? { secrets: { source: secrets, folders: secretFolders(dirs.mode, a.iofsPath, log) } } : {}),
    ...(changes ? { changes } : {}),
    ...(tracing ? { spans: new CallSpans(tracing.recorder) } : {}),
    ...(histograms ? { histograms } : {}),
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

/**
 * The secrets of a role with a database, sealed under FNTS_SECRET_KEY, else
 * the data directory's key file (made at the first start), else (an
 * in-memory database) a key of this process. Refuses to start when stored
 * secrets were sealed under another key (a database restored without its
 * key file, FNTS_SECRET_KEY changed): nothing else would tell, until every
 * call of their fns failed.
 */
export async function openSecrets(config: Config, logger: Logger, datastore: SqlDatastore): Promise<SqlSecretStore> {
  const source = await loadSecretKey(config.secretKey?.bytes(), config.dataDir);
  const store = new SqlSecretStore(() => datastore.database(), new SecretBox(source.key), datastore.disk);
  const where = source.from === 'env' ? 'FNTS_SECRET_KEY' : source.from === 'process' ? 'a key of this process' : source.path!;
  const elsewhere = await store.sealedElsewhere();
  if (elsewhere.length > 0) {
    const count = elsewhere.reduce((n, e) => n + e.count, 0);
    const ids = elsewhere.map((e) => e.keyId).join(', ');
    throw new Error(
      `${count} secret(s) in the database were stored with another key (key id ${ids}) than this server's (key id ${store.keyId}, from ${where}): ` +
        `start with the key they were stored with (FNTS_SECRET_KEY, or the file secret.key from the backup of the data directory${config.dataDir ? ` ${config.dataDir}` : ''}); ` +
        `if that key is lost, so are they: delete them (${datastore.kind === 'sqlite' ? 'sqlite3 <database file>' : datastore.kind === 'postgres' ? 'psql' : 'mysql'} "DELETE FROM secrets WHERE key_id <> '${store.keyId}'") and set them again`,
    );
  }
  if (source.from === 'made')
    logger.info({ keyFile: source.path, keyId: store.keyId }, `made the key that encrypts secrets: ${source.path}; back it up with the database (without it, stored secrets cannot be read)`);
  else if (source.from === 'process') logger.info({ keyId: store.keyId }, 'secrets are encrypted with a key of this process only (the database is in memory, so they last as long as the process)');
  else logger.info({ keyId: store.keyId, key: where }, `secrets are encrypted with the key from ${where}`);
  return store;
}

/** The containers' source of secrets, from a role's secrets store. */
export function secretSource(store: SqlSecretStore): SecretSource {
  return { secretsFor: (appId, fnId) => store.valuesFor(appId, fnId) };
}

/** The call recorder of a role that keeps records (FNTS_CALL_RECORDS), writing to `store`; undefined when off. */
export function recorderFor(config: Config, logger: Logger, store: CallRecorderOptions['store']): CallRecorder | undefined {
  if (!config.callRecords) return undefined;
  return new CallRecorder({ store, log: logger.child({ module: 'records' }), retentionMs: config.callRetentionMs, perFn: config.callRetentionPerFn });
}

/**
 * How long the records of detached calls that end together gather before
 * they are written as one batch: nobody waits on them but the worker
 * settling its call (the queue is told once its record is stored), and a
 * drain of a few hundred calls a second otherwise writes a statement per
 * call (on Postgres, ~1.7 calls a statement, the largest part of what a
 * drained call cost beyond a sync one).
 */
const DETACHED_RECORD_LINGER_MS = 20;
/** Records per batch at most (more wait for the next). */
const DETACHED_RECORD_BATCH = 500;

/**
 * Detached calls: the intake that queues them, and workers that lease them
 * from the queue and run them through `invoker` while `resources` has async
 * room. Their records go to `store` (undefined: records are off), gathered
 * for DETACHED_RECORD_LINGER_MS rather than FLUSH_MS as the recorder's, each
 * with its attempt's log in the same write: the queue lets go of a call only
 * once its outcome is kept, and a record never says a call ended before its
 * log can be read.
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
  const records =
    store &&
    new GroupCommit<{ record: CallRecord; log: CallLogEntry | undefined }, void>({
      write: async (parts) => {
        await store.insert(
          parts.map((p) => p.record),
          parts.flatMap((p) => (p.log ? [p.log] : [])),
        );
        return parts.map(() => undefined);
      },
      maxItems: DETACHED_RECORD_BATCH,
      lingerMs: DETACHED_RECORD_LINGER_MS,
      sharedFailure: failsEveryWrite,
    });
  const workers = new AsyncWorkers({
    invoker: o.invoker,
    queue: o.queue,
    resources: o.resources,
    log,
    record: async (r, text) => {
      await records?.submit({ record: r, log: text === undefined ? undefined : { callId: r.id, fnId: r.fn_id, appId: r.app_id, created: Date.parse(r.created_at), log: text } });
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

/**
 * The fleet's mutual TLS files (FNTS_GRPC_TLS_CA, _KEY, _CERT), read, for its
 * gRPC servers and channels alike, with the name runners' certificates are
 * checked against (FNTS_GRPC_TLS_RUNNER_NAME; servers ignore it); undefined: plaintext.
 */
export function fleetTls(config: Config): { ca: Buffer; key: Buffer; cert: Buffer; serverName?: string } | undefined {
  const tls = config.fleet.tls;
  if (!tls) return undefined;
  return { ca: readFileSync(tls.ca), key: readFileSync(tls.key), cert: readFileSync(tls.cert), ...(tls.runnerName ? { serverName: tls.runnerName } : {}) };
}

/**
 * Says at start how a gRPC port (`what`) is served: with mutual TLS, or in
 * plaintext on loopback, or in plaintext on the network because
 * FNTS_GRPC_INSECURE=true (compileConfig refuses plaintext on the network otherwise).
 */
export function logGrpcSecurity(config: Config, logger: Logger, what: string, grpcPort: number): void {
  const host = config.fleet.grpcListenHost;
  if (config.fleet.tls) logger.info({ grpcPort, host }, `${what} serves mutual TLS`);
  else if (isLoopbackHost(host)) logger.info({ grpcPort, host }, `${what} is plaintext on loopback: only this machine reaches it`);
  else
    logger.warn(
      { grpcPort, host },
      `${what} is PLAINTEXT on ${host} (FNTS_GRPC_INSECURE=true): whoever reaches it can run any image on the fleet's hosts; keep it on a private network, or set FNTS_GRPC_TLS_CERT, _KEY and _CA (fnts certs makes them)`,
    );
}

/**
 * API tokens on a node that keeps the database (full, api), unless
 * FNTS_AUTH=off: the tokens it accepts, read again every half second, and
 * the first admin token made when there is none (auth/admin.ts).
 */
export async function startTokens(config: Config, logger: Logger, store: TokenStore, made: Building): Promise<void> {
  if (!config.auth.enabled) {
    const open = !isLoopbackHost(config.listenHost);
    const say = 'FNTS_AUTH=off: the management API (/v2) is open to whoever reaches this port';
    if (open) logger.warn({ listen: config.listenHost }, `${say}, and it listens on ${config.listenHost}: set FNTS_AUTH=on, or FN_LISTEN_HOST=127.0.0.1`);
    else logger.info(say);
    return;
  }
  const log = logger.child({ module: 'auth' });
  const registry = new TokenRegistry({ store, log, adminToken: config.auth.adminToken });
  await registry.start();
  made.tokens = { store, registry };
  if (config.dataDir === undefined && config.auth.adminToken === undefined) {
    throw new ConfigError('an in-memory database keeps no files, so no first admin token can be written for you: set FNTS_ADMIN_TOKEN (32 characters or more), or FNTS_DATA_DIR');
  }
  await ensureAdminToken({ store, registry, fromEnv: config.auth.adminToken !== undefined, dataDir: config.dataDir ?? '', log });
}
