/**
 * config/ — the one place that reads process.env.
 *
 * `compileConfig(env)` turns raw environment variables (Fn's names where Fn has
 * one) into a frozen, validated `Config`. A bad value fails fast at startup
 * with a `ConfigError` naming the variable, the value and what is accepted.
 */
import { createHash } from 'node:crypto';
import { accessSync, constants as fsConstants, existsSync, readFileSync, realpathSync } from 'node:fs';
import { isIP } from 'node:net';
import { homedir, hostname, tmpdir } from 'node:os';
import { basename, delimiter, dirname, join, resolve } from 'node:path';
import { isLoopbackHost } from '../models/index.js';
import { DbUrlError, parseDbUrl, type DbLocation } from './db-url.js';

export type NodeType = 'full' | 'api' | 'lb' | 'pure-runner' | 'poolmanager';
/** FNTS_CONTROL_PLANE: what the pool manager starts runners through. */
export type ControlPlaneKind = 'docker' | 'swarm' | 'kubernetes';
/** FN_PLACER: how an LB picks runners. */
export type PlacerKind = 'naive' | 'ch' | 'wait';
export type LogLevel = 'trace' | 'debug' | 'info' | 'warn' | 'error' | 'fatal' | 'silent';
/** How log lines are written: one JSON object each, or text for people. */
export type LogFormat = 'json' | 'text';

export interface Config {
  /** FN_NODE_TYPE: which role this process plays. */
  readonly nodeType: NodeType;
  /** FN_PORT: HTTP port of the API and invoke endpoints. */
  readonly port: number;
  /** FN_LISTEN_HOST: address the HTTP port binds (default all interfaces); the gRPC port's is FNTS_GRPC_LISTEN_HOST. */
  readonly listenHost: string;
  /** FN_DB_URL as given, e.g. `sqlite3:///var/lib/fnts/fn.db`: holds the password, so never log it (`db.shown` has it hidden). */
  readonly dbUrl: string;
  /** FN_DB_URL parsed (db-url.ts): which database, where; `shown` is the URL to print. */
  readonly db: DbLocation;
  /** FNTS_DB_POOL_SIZE (10): connections each node keeps to a Postgres or MySQL database (SQLite: one, and the record writer's). */
  readonly dbPoolSize: number;
  /**
   * Where a node with a database keeps the files that go with it (the
   * secrets' key file `secret.key`, the first admin token `admin.token`):
   * FNTS_DATA_DIR when set, else the folder of FN_DB_URL's SQLite file
   * (`./data` by default), else (Postgres, MySQL) `./data`; undefined for
   * an in-memory database without FNTS_DATA_DIR (nothing is kept, so
   * nothing needs a place).
   */
  readonly dataDir: string | undefined;
  /**
   * FNTS_SECRET_KEY: the key that encrypts secrets at rest (32 bytes, given
   * as 64 hex characters or in base64); undefined: the key file
   * `<dataDir>/secret.key`, made at first start (datastore/secret-key.ts).
   */
  readonly secretKey: SecretKey | undefined;
  /** FN_LOG_LEVEL */
  readonly logLevel: LogLevel;
  /** FN_LOG_FORMAT (json): `json` for log collectors, `text` for reading in a terminal. */
  readonly logFormat: LogFormat;
  /**
   * FN_PUBLIC_LB_URL: base URL put into the invoke/trigger endpoint
   * annotations; when unset the request's own scheme and host are used.
   */
  readonly publicUrl: string | undefined;
  /** Largest JSON body accepted by the management API, in bytes. */
  readonly maxApiBodyBytes: number;
  /**
   * FNTS_DRAIN_TIMEOUT_MSECS (25000): on SIGTERM/SIGINT, how long calls in
   * flight may take to finish before they are cut (503) and every container
   * is removed.
   */
  readonly drainTimeoutMs: number;
  readonly agent: AgentSettings;

  // ---- call records (the calls API)
  /** FN_MQ_URL: the queue of detached calls; undefined = the embedded one (in the server's database), or redis://host:port/db. */
  readonly mqUrl: string | undefined;
  /** Detached calls: how big a body is kept, when a call is poison, whether a queue may lose calls. */
  readonly detached: DetachedSettings;
  /** FNTS_CALL_RECORDS (on): keep a record and log of every call; `off` keeps none. */
  readonly callRecords: boolean;
  /** FNTS_METRICS (on): serve Prometheus metrics at /metrics; `off` serves none and counts nothing. */
  readonly metrics: boolean;
  /**
   * FNTS_CONSOLE_FLEET (none): the base URLs (http or https, comma
   * separated) of the fleet's other nodes' HTTP ports (FN_PORT of each LB,
   * pure runner and pool manager), whose /metrics the console of an API or
   * full node reads for its Fleet view. Without a path, a query or
   * credentials; at most 64.
   */
  readonly consoleFleet: readonly string[];
  /**
   * Where spans go (OTLP over HTTP), from the standard OTEL_EXPORTER_OTLP_TRACES_ENDPOINT
   * (used as is) or OTEL_EXPORTER_OTLP_ENDPOINT (+ /v1/traces); undefined = tracing off.
   */
  readonly otlpTracesUrl: string | undefined;
  /** OTEL_EXPORTER_OTLP_TRACES_PROTOCOL or OTEL_EXPORTER_OTLP_PROTOCOL (http/protobuf, the standard's default; or http/json): how spans are encoded. */
  readonly otlpProtocol: OtlpProtocol;
  /** OTEL_SERVICE_NAME (fnts): the service the spans belong to. */
  readonly otelServiceName: string;
  /** OTEL_TRACES_SAMPLER (parentbased_always_on) and OTEL_TRACES_SAMPLER_ARG (the ratio, 0..1, default 1): which calls are traced. */
  readonly otelSampler: { readonly kind: TraceSampler; readonly ratio: number };
  /** FN_CALL_RETENTION (7 days; Go durations such as 168h, 30m, or seconds): records older than this are removed. */
  readonly callRetentionMs: number;
  /** FNTS_CALL_RETENTION_PER_FN (10000): at most this many records are kept per fn, the newest. */
  readonly callRetentionPerFn: number;

  // ---- how long a client may take to send its request (the HTTP server's own bounds)
  /** FNTS_REQUEST_HEADERS_TIMEOUT_MSECS (10000): from a request's first byte until its headers are in. */
  readonly requestHeadersTimeoutMs: number;
  /** FNTS_REQUEST_TIMEOUT_MSECS (30000): from a request's first byte until its whole body is in; at least the headers timeout. */
  readonly requestTimeoutMs: number;

  // ---- fleet (lb, pure-runner)
  readonly fleet: FleetSettings;
  // ---- the pool manager (poolmanager)
  readonly pool: PoolSettings;
  readonly auth: AuthSettings;
}

/** API tokens (docs/operations.md#tokens). */
export interface AuthSettings {
  /** FNTS_AUTH (on): every /v2 request needs `Authorization: Bearer <token>`; off: the API is open to whoever reaches it, as Fn's. */
  readonly enabled: boolean;
  /** FNTS_METRICS_AUTH (off): /metrics needs a token (of any role) too. */
  readonly metricsAuth: boolean;
  /** FNTS_ADMIN_TOKEN: an admin token the operator chose (32 characters or more); unset: one is made at first start (admin.token). */
  readonly adminToken: string | undefined;
  /** FN_TOKEN: what this node sends to the API node (LBs), as the fn CLI sends it. */
  readonly apiToken: string | undefined;
}

const MIN_ADMIN_TOKEN_CHARS = 32;

function authSettings(env: Env): AuthSettings {
  const adminToken = read(env, 'FNTS_ADMIN_TOKEN');
  if (adminToken !== undefined && (adminToken.length < MIN_ADMIN_TOKEN_CHARS || adminToken.length > 512 || !/^[!-~]+$/.test(adminToken))) {
    throw new ConfigError(`FNTS_ADMIN_TOKEN must be ${MIN_ADMIN_TOKEN_CHARS} to 512 printable characters without spaces; make one with: openssl rand -hex 32`);
  }
  const apiToken = read(env, 'FN_TOKEN');
  if (apiToken !== undefined && !/^[!-~]{1,512}$/.test(apiToken)) throw new ConfigError('FN_TOKEN must be a token as fnts made it (printable characters, no spaces)');
  return Object.freeze({
    enabled: oneOf(env, 'FNTS_AUTH', ['on', 'off'] as const, 'on') === 'on',
    metricsAuth: oneOf(env, 'FNTS_METRICS_AUTH', ['on', 'off'] as const, 'off') === 'on',
    adminToken,
    apiToken,
  });
}

/** Detached calls (Fn-Invoke-Type: detached) and their queue (FN_MQ_URL). */
export interface DetachedSettings {
  /**
   * FNTS_ASYNC_MAX_BODY_SIZE (6 MiB): the largest detached body accepted
   * (413 beyond), FN_MAX_REQUEST_SIZE too when that is smaller. Fn caps no
   * body by default, but Fn never stores one: a detached body here is kept
   * whole in the queue until its call has run.
   */
  readonly maxBodyBytes: number;
  /**
   * FNTS_ASYNC_MAX_REDELIVERIES (3): a detached call whose lease was taken
   * back from a dead process this many times is dead-lettered, not run again.
   */
  readonly maxRedeliveries: number;
  /**
   * FNTS_MQ_ALLOW_VOLATILE (false): start on a Redis server that would lose
   * queued calls when it restarts (no append-only file fsynced at least every second).
   */
  readonly allowVolatile: boolean;
}

/** FNTS_ASYNC_MAX_BODY_SIZE's default. */
export const DEFAULT_ASYNC_MAX_BODY_BYTES = 6 * 1024 * 1024;

function detachedSettings(env: Env): DetachedSettings {
  return Object.freeze({
    maxBodyBytes: integer(env, 'FNTS_ASYNC_MAX_BODY_SIZE', DEFAULT_ASYNC_MAX_BODY_BYTES, 1, 1024 * 1024 * 1024),
    maxRedeliveries: integer(env, 'FNTS_ASYNC_MAX_REDELIVERIES', 3, 1, 100),
    allowVolatile: flag(env, 'FNTS_MQ_ALLOW_VOLATILE'),
  });
}

/**
 * The pool manager's settings (FN_NODE_TYPE=poolmanager). Fn's 2018 manager
 * had no variables of its own besides FN_PORT (its gRPC port here is
 * FN_GRPC_PORT, FN_PORT serving probes and metrics as every role's does);
 * the rest are fnts's.
 */
export interface PoolSettings {
  /** FN_GRPC_PORT (9191 for this role): where LBs reach NodePoolScaler and RunnerManager (their FN_NPM_ADDRESS). */
  readonly grpcPort: number;
  /** FNTS_CONTROL_PLANE (docker): docker (containers on this engine), swarm (a service per group) or kubernetes (a Deployment per group). */
  readonly controlPlane: ControlPlaneKind;
  /** FNTS_RUNNER_IMAGE (fnts/fnts:latest, npm run image:runner): the image runners run. */
  readonly runnerImage: string;
  /** FNTS_POOL_NAME (fnts): the manager's name on its runners; a restarted manager with the same name takes them back. */
  readonly name: string;
  /** FNTS_RUNNER_MEMORY_MB (4096, Fn's capacity per runner): the memory each runner offers to calls. */
  readonly runnerMemMb: number;
  /** FNTS_MIN_RUNNERS (1) and FNTS_MAX_RUNNERS (10): runners per group. */
  readonly minRunners: number;
  readonly maxRunners: number;
  /** FNTS_PREDICTOR (forecast): conservative (Fn's 2018 manager: the demand of the moment) or forecast (ours: ahead of a rise). */
  readonly predictor: 'conservative' | 'forecast';
  /** FNTS_REQUIREMENT_TTL_MSECS (5000): an LB's requirement lasts this long unless restated; an LB silent this long is purged. */
  readonly requirementTtlMs: number;
  /** FNTS_SCALE_TICK_MSECS (1000): how often groups are scaled. */
  readonly tickMs: number;
  /** FNTS_RUNNER_START_MSECS (5000): how long a runner takes to start, how far ahead the forecast looks. */
  readonly runnerStartMs: number;
  /** FNTS_RUNNER_START_TIMEOUT_MSECS (120000): a runner not answering this long after it appeared is removed. */
  readonly startTimeoutMs: number;
  /** FNTS_DRAIN_GRACE_MSECS (3000): a draining runner stays this long at least, so every LB sees it gone from the membership. */
  readonly drainGraceMs: number;
  /** FNTS_MAX_DRAIN_MSECS (600000): a draining runner is removed after this long whatever it still runs. */
  readonly maxDrainMs: number;
  /** FNTS_MAX_PROVISION (20, Fn's largest request at once): runners asked for per group per tick. */
  readonly maxProvisionPerTick: number;
  /** FNTS_POOL_IOFS_PATH (/tmp/fnts-pool): docker and swarm planes: the host folder of the runners' function sockets (same path on every node). */
  readonly iofsPath: string;
  /** FNTS_RUNNER_PUBLISH_HOST: where runner ports are dialled (docker plane: also published; default 127.0.0.1); swarm default: each task's node address. */
  readonly publishHost: string | undefined;
  /** FNTS_RUNNER_PORT_RANGE (unset: ports the engine picks): docker plane: the host ports runners are published on, e.g. 9200-9299. */
  readonly runnerPorts: PortRange | undefined;
  /** DOCKER_HOST (unix:///var/run/docker.sock): docker and swarm planes: the engine the manager talks to, and gives its runners. */
  readonly engine: EngineAddress;
  /** FNTS_SWARM_NETWORK: swarm plane: the network LBs reach runners on (their task address, port 9190); unset: a host port on the node. */
  readonly swarmNetwork: string | undefined;
  /** FNTS_K8S_API_URL: kubernetes plane: this API server, with the service account's token; unset: the kubeconfig's cluster, or in a pod its own. */
  readonly k8sApiUrl: string | undefined;
  /** FNTS_K8S_NAMESPACE (the pod's own, or default). */
  readonly k8sNamespace: string;
  /**
   * FNTS_K8S_TLS_SECRET: kubernetes plane with FNTS_GRPC_TLS_*: the Secret
   * (keys tls.crt, tls.key, ca.crt) each runner pod mounts for its
   * certificate; required there, as a pod cannot see the manager's files.
   */
  readonly k8sTlsSecret: string | undefined;
}

/** Host ports from `first` to `last`, both included. */
export interface PortRange {
  readonly first: number;
  readonly last: number;
}

/**
 * A Docker engine's address, as DOCKER_HOST gives it: a unix socket's path,
 * or a tcp:// host and port. `tls`: DOCKER_TLS_VERIFY or DOCKER_CERT_PATH is
 * set (the client certificates live in a folder).
 */
export type EngineAddress =
  { readonly kind: 'unix'; readonly path: string } | { readonly kind: 'tcp'; readonly host: string; readonly port: number; readonly tls: boolean } | { readonly kind: 'other'; readonly url: string };

/** How the fleet roles find each other (Fn's variables, and fnts's own for TLS and caching). */
export interface FleetSettings {
  /** FN_GRPC_PORT (9190): a pure runner's RunnerProtocol port. */
  readonly grpcPort: number;
  /** FN_RUNNER_API_URL: an LB's API node (apps, fns, triggers); required for lb. */
  readonly runnerApiUrl: string | undefined;
  /** FN_RUNNER_ADDRESSES (host:port,...): an LB's runners, the same for every runner group; an lb needs this or npmAddress. */
  readonly runnerAddresses: readonly string[];
  /**
   * FN_NPM_ADDRESS (host:port, Fn's 2018 variable): the pool manager an LB
   * asks for each runner group's runners and tells what each group needs;
   * instead of FN_RUNNER_ADDRESSES.
   */
  readonly npmAddress: string | undefined;
  /** FNTS_NPM_POLL_MSECS (1000): how often an LB asks the pool manager for each group's runners. */
  readonly npmPollMs: number;
  /** FNTS_NPM_ADVERTISE_MSECS (1000): how often an LB tells the pool manager what each group needs. */
  readonly npmAdvertiseMs: number;
  /** FN_PLACER (wait): naive (round robin, as Fn), ch (consistent hash, as Fn) or wait (ours). */
  readonly placer: PlacerKind;
  /** FNTS_LB_CACHE_MSECS (1000): how long an LB uses an app, fn or trigger before asking the API node again. */
  readonly lbCacheMs: number;
  /**
   * FNTS_GRPC_TLS_CERT, FNTS_GRPC_TLS_KEY, FNTS_GRPC_TLS_CA (files, PEM, as
   * absolute paths): mutual TLS between LBs and runners (and an LB's pool
   * manager), all three or none. Undefined = plaintext.
   */
  readonly tls: FleetTls | undefined;
  /**
   * FNTS_GRPC_LISTEN_HOST (0.0.0.0): the address a pure runner's or pool
   * manager's gRPC port binds. Plaintext (no `tls`) is refused on any but a
   * loopback address unless `insecure`.
   */
  readonly grpcListenHost: string;
  /**
   * FNTS_GRPC_INSECURE (false): accept plaintext gRPC where it can be
   * reached from the network (a private network the operator trusts): a
   * pure runner's or pool manager's port on a non-loopback address, and a
   * pool manager's runners. Whoever reaches a plaintext runner can run any
   * image on its host.
   */
  readonly insecure: boolean;
}

/** The fleet's mutual TLS files, and how runners' certificates are checked. */
export interface FleetTls {
  readonly cert: string;
  readonly key: string;
  readonly ca: string;
  /**
   * FNTS_GRPC_TLS_RUNNER_NAME: the name (DNS or IP) a runner's certificate
   * must carry, instead of the address it is dialled at: for runners whose
   * addresses are not known when certificates are made (a pool manager's on
   * swarm or kubernetes, which present the manager's certificate).
   * Undefined: the dialled address.
   */
  readonly runnerName: string | undefined;
}

/** Settings of the agent and its container driver (Fn's names and defaults). */
export interface AgentSettings {
  /** FN_FREEZE_IDLE_MSECS (50); negative disables freezing (Infinity), as in Fn. */
  readonly freezeIdleMs: number;
  /** FN_EJECT_IDLE_MSECS (1000); 0 or more. */
  readonly ejectIdleMs: number;
  /**
   * FNTS_KEEPALIVE_POLICY (histogram): how long an idle container stays.
   * `fixed`: the fn's idle_timeout (Fn's rule); `histogram`: each fn's
   * idle-time histogram decides when to release it and when to pre-warm
   * the next, within its idle_timeout (agent/keepalive.ts).
   */
  readonly keepAlivePolicy: 'fixed' | 'histogram';
  /** FNTS_KEEPALIVE_BIN_MSECS (10000): the width of the histogram's bins (1440 of them: 4 hours at the default; narrower bins cover less); 100 to 3600000. */
  readonly keepAliveBinMs: number;
  /** FN_HOT_POLL_MSECS (200); 10 to 60000. */
  readonly hotPollMs: number;
  /** FN_HOT_START_TIMEOUT_MSECS (5000): from the engine's start to the FDK's socket; at least 1. */
  readonly hotStartTimeoutMs: number;
  /** FN_HOT_PULL_TIMEOUT_MSECS (10 minutes); at least 1. */
  readonly hotPullTimeoutMs: number;
  /** FN_MAX_RESPONSE_SIZE bytes; 0 = no limit. */
  readonly maxResponseBytes: number;
  /** FN_MAX_REQUEST_SIZE bytes; 0 = no limit. */
  readonly maxRequestBytes: number;
  /** FN_MAX_LOG_SIZE_BYTES (1 MiB, as Fn): the most of a container's output kept for one call. */
  readonly maxLogBytes: number;
  /** FN_MAX_TOTAL_MEMORY_BYTES; 0 = what the host allows. */
  readonly maxTotalMemoryBytes: number;
  /** FN_MAX_TOTAL_CPU_MCPUS; 0 = what the host allows. */
  readonly maxTotalCpuMillis: number;
  /** FN_ENABLE_NB_RESOURCE_TRACKER */
  readonly nonBlockingResources: boolean;
  /** FN_IOFS_PATH: host folder for the containers' sockets; default derived from FN_DB_URL. */
  readonly iofsPath: string;
  /** FN_IOFS_TMPFS: each container's socket folder a size-capped tmpfs: `auto` (where this process can mount beside the engine), `true` (required), `false`. */
  readonly iofsTmpfs: 'auto' | 'true' | 'false';
  /**
   * FN_DOCKER_NETWORKS (space or comma separated): the operator's network
   * for functions, the first joined; set, fnts fences nothing (the operator
   * does).
   */
  readonly dockerNetworks: readonly string[];
  /**
   * FNTS_FUNCTION_NETWORK (isolated): `isolated` puts functions on a network
   * fnts fences (no connection to this host, other functions, link-local
   * addresses, the host's networks: drivers/docker/network.ts); `open` keeps
   * them on Docker's default bridge, reaching whatever it reaches.
   */
  readonly functionNetwork: 'isolated' | 'open';
  /** FNTS_FUNCTION_NETWORK_NAME (fnts-functions): that network's name, shared by the fnts servers of one engine. */
  readonly functionNetworkName: string;
  /**
   * FNTS_FUNCTION_NETWORK_BLOCK (`default`): the IPv4 ranges functions may
   * not reach beyond this host; `default` stands for link-local and the
   * host's own networks, and may be listed with more ranges or left out.
   */
  readonly functionNetworkBlock: { readonly defaults: boolean; readonly cidrs: readonly string[] };
  /** FN_MAX_PIDS (50) */
  readonly maxPids: number;
  /** FN_MAX_OPEN_FILES (350) */
  readonly maxOpenFiles: number;
  /** not FN_DISABLE_READONLY_ROOTFS */
  readonly readOnlyRootfs: boolean;
  /** not FN_DISABLE_UNPRIVILEGED_CONTAINERS */
  readonly unprivileged: boolean;
  /** FNTS_STATS_INTERVAL_MSECS (1000): how often a running call's container is sampled (the engine publishes once a second); 0 or negative disables (Infinity). */
  readonly statsIntervalMs: number;
  /** FNTS_LAUNCH_POLICY: 'adaptive' (default) or 'seed' (Fn's rule: isNewContainerNeeded in api/agent/slots.go), for comparison. */
  readonly launchPolicy: 'adaptive' | 'seed';
  /**
   * Whose containers these are: a hash of the canonical database location
   * (the same for every spelling of one data directory), or for a pure
   * runner without FN_DB_URL of its host and gRPC port; stable across
   * restarts. Each process adds its own instance identity beside it, so that
   * servers sharing a database never remove each other's live containers.
   */
  readonly owner: string;
  /** FN_CONTAINER_LABEL_TAG (Fn's variable): an extra label `fnts.tag=<tag>` on every container, to classify them. */
  readonly containerTag: string | undefined;
}

export class ConfigError extends Error {
  override readonly name = 'ConfigError';
}

/**
 * Key bytes that never show: printed, logged or turned into JSON (the whole
 * Config, say), it says `[secret key]`. Read them with `bytes()`, a copy.
 */
export class SecretKey {
  readonly #bytes: Buffer;

  constructor(bytes: Buffer) {
    this.#bytes = Buffer.from(bytes);
  }

  bytes(): Buffer {
    return Buffer.from(this.#bytes);
  }

  toJSON(): string {
    return '[secret key]';
  }

  toString(): string {
    return '[secret key]';
  }

  [Symbol.for('nodejs.util.inspect.custom')](): string {
    return '[secret key]';
  }
}

/** The size of a secrets key (AES-256). */
export const SECRET_KEY_BYTES = 32;

/**
 * FNTS_SECRET_KEY: 32 bytes, as 64 hex characters or base64 (standard or
 * URL-safe, padded or not). The value is never repeated in the error: it
 * may be a real key with a typo.
 */
function secretKey(env: Env): SecretKey | undefined {
  const raw = read(env, 'FNTS_SECRET_KEY');
  if (raw === undefined) return undefined;
  let bytes: Buffer | undefined;
  if (/^[0-9a-fA-F]{64}$/.test(raw)) bytes = Buffer.from(raw, 'hex');
  else if (/^[A-Za-z0-9+/_-]{43}={0,1}$/.test(raw)) bytes = Buffer.from(raw.replace(/-/g, '+').replace(/_/g, '/'), 'base64');
  if (bytes?.length !== SECRET_KEY_BYTES) {
    throw new ConfigError(
      `FNTS_SECRET_KEY is not a key of ${SECRET_KEY_BYTES} bytes (its value is not shown); give 64 hex characters or ${SECRET_KEY_BYTES} bytes in base64 (make one with: openssl rand -hex 32), or unset it to keep the key in the file secret.key of the data directory`,
    );
  }
  return new SecretKey(bytes);
}

/**
 * The data directory (see Config.dataDir): FNTS_DATA_DIR, else the folder
 * of the SQLite file FN_DB_URL names; undefined for an in-memory database.
 */
function dataDir(env: Env, db: DbLocation, cwd: string): string | undefined {
  const given = read(env, 'FNTS_DATA_DIR');
  if (given !== undefined) return resolve(cwd, given);
  if (db.kind !== 'sqlite') return resolve(cwd, 'data');
  return db.path === ':memory:' ? undefined : dirname(db.path);
}

const NODE_TYPES: readonly NodeType[] = ['full', 'api', 'lb', 'pure-runner', 'poolmanager'];
/** Roles Fn has that later fnts releases add; named so the error can say so. */
const PLANNED_NODE_TYPES = ['runner'];
const LOG_LEVELS: readonly LogLevel[] = ['trace', 'debug', 'info', 'warn', 'error', 'fatal', 'silent'];
const LOG_FORMATS: readonly LogFormat[] = ['json', 'text'];

type Env = Readonly<Record<string, string | undefined>>;

function read(env: Env, name: string): string | undefined {
  const value = env[name];
  return value === undefined || value.trim() === '' ? undefined : value.trim();
}

function integer(env: Env, name: string, fallback: number, min: number, max: number): number {
  const raw = read(env, name);
  if (raw === undefined) return fallback;
  if (!/^-?\d+$/.test(raw)) throw new ConfigError(`${name}=${raw} is not a whole number; use a value from ${min} to ${max}`);
  const value = Number(raw);
  if (value < min || value > max) throw new ConfigError(`${name}=${raw} is out of range; use a value from ${min} to ${max}`);
  return value;
}

/** A duration in milliseconds from `min` to `max`; anything else stops the server with a message. */
function msecs(env: Env, name: string, fallback: number, min: number, max = 24 * 3600_000): number {
  const raw = read(env, name);
  if (raw === undefined) return fallback;
  if (!/^-?\d+$/.test(raw)) throw new ConfigError(`${name}=${raw} is not a whole number of milliseconds; use a value from ${min} to ${max}`);
  const value = Number(raw);
  if (value < min || value > max) throw new ConfigError(`${name}=${raw} is out of range; use a value from ${min} to ${max} milliseconds`);
  return value;
}

/** A timer a negative value switches off (Infinity), as Fn's FN_FREEZE_IDLE_MSECS. */
function optionalMsecs(env: Env, name: string, fallback: number): number {
  const raw = read(env, name);
  if (raw !== undefined && /^-\d+$/.test(raw)) return Infinity;
  return msecs(env, name, fallback, 0);
}

/** 0 or negative disables sampling; otherwise at least 50 ms. */
function statsInterval(env: Env): number {
  const ms = optionalMsecs(env, 'FNTS_STATS_INTERVAL_MSECS', 1000);
  return ms === 0 || ms === Infinity ? Infinity : Math.max(50, ms);
}

/**
 * The database's location, spelled one way: a SQLite file by its resolved
 * path (symbolic links followed, `.` and `..` gone), anything else by its URL.
 */
export function canonicalDbLocation(dbUrl: string, cwd: string): string {
  let db: DbLocation;
  try {
    db = parseDbUrl(dbUrl, cwd);
  } catch {
    return dbUrl;
  }
  // A database server by where it is and which database (no password, no options).
  if (db.kind !== 'sqlite')
    return db.kind === 'mysql' && db.socketPath !== undefined ? `mysql://${db.user}@unix(${db.socketPath})/${db.database}` : `${db.kind}://${db.user}@${db.host}:${db.port}/${db.database}`;
  if (db.path === ':memory:') return 'sqlite3://:memory:';
  const file = db.path;
  let dir = dirname(file);
  try {
    dir = realpathSync(dir);
  } catch {
    // not created yet: the resolved path is already canonical
  }
  return `sqlite3://${join(dir, basename(file))}`;
}

function flag(env: Env, name: string): boolean {
  const raw = read(env, name)?.toLowerCase();
  if (raw === undefined) return false;
  if (['1', 't', 'true', 'yes', 'on'].includes(raw)) return true;
  if (['0', 'f', 'false', 'no', 'off'].includes(raw)) return false;
  throw new ConfigError(`${name}=${raw} is not a boolean; use true or false`);
}

function oneOf<T extends string>(env: Env, name: string, allowed: readonly T[], fallback: T): T {
  const raw = read(env, name)?.toLowerCase();
  if (raw === undefined) return fallback;
  if ((allowed as readonly string[]).includes(raw)) return raw as T;
  throw new ConfigError(`${name}=${raw} is not supported; use one of: ${allowed.join(', ')}`);
}

/** FN_IOFS_TMPFS: Fn's boolean (true/false in any of flag()'s spellings), or `auto`, the default. */
function iofsTmpfs(env: Env): 'auto' | 'true' | 'false' {
  const raw = read(env, 'FN_IOFS_TMPFS');
  if (raw === undefined || raw.toLowerCase() === 'auto') return 'auto';
  try {
    return flag(env, 'FN_IOFS_TMPFS') ? 'true' : 'false';
  } catch {
    throw new ConfigError(`FN_IOFS_TMPFS=${raw} is not supported; use auto, true or false`);
  }
}

/** FNTS_FUNCTION_NETWORK_NAME: a Docker network name. */
function networkName(env: Env): string {
  const name = read(env, 'FNTS_FUNCTION_NETWORK_NAME') ?? 'fnts-functions';
  if (!/^[A-Za-z0-9][A-Za-z0-9_.-]{0,62}$/.test(name)) {
    throw new ConfigError(`FNTS_FUNCTION_NETWORK_NAME=${name} is not a network name; use up to 63 letters, digits, '.', '_' or '-', starting with a letter or digit (default fnts-functions)`);
  }
  return name;
}

/**
 * FNTS_FUNCTION_NETWORK_BLOCK: `default` and IPv4 ranges (a.b.c.d/n; a bare
 * address is /32), space or comma separated. The functions' network has no
 * IPv6, so an IPv6 range is refused rather than silently ignored.
 */
function blockedRanges(env: Env): { readonly defaults: boolean; readonly cidrs: readonly string[] } {
  const raw = read(env, 'FNTS_FUNCTION_NETWORK_BLOCK');
  if (raw === undefined) return Object.freeze({ defaults: true, cidrs: Object.freeze([]) });
  let defaults = false;
  const cidrs: string[] = [];
  for (const item of raw.split(/[\s,]+/).filter(Boolean)) {
    if (item.toLowerCase() === 'default') {
      defaults = true;
      continue;
    }
    const m = /^(\d{1,3})\.(\d{1,3})\.(\d{1,3})\.(\d{1,3})(?:\/(\d{1,2}))?$/.exec(item);
    if (!m || m.slice(1, 5).some((o) => Number(o) > 255) || Number(m[5] ?? 32) > 32) {
      const v6 = item.includes(':') ? " (IPv6 ranges are not needed: the functions' network has no IPv6)" : '';
      throw new ConfigError(
        `FNTS_FUNCTION_NETWORK_BLOCK has ${item}, which is not an IPv4 range${v6}; list ranges such as 10.0.0.0/8 and the word default (link-local and the host's own networks), e.g. default,10.0.0.0/8`,
      );
    }
    cidrs.push(m[5] === undefined ? `${item}/32` : item);
  }
  return Object.freeze({ defaults, cidrs: Object.freeze(cidrs) });
}

/**
 * Builds the default database URL: `./data/fn.db` under the working directory,
 * in Fn's `sqlite3://` form.
 */
function defaultDbUrl(cwd: string): string {
  return `sqlite3://${resolve(cwd, 'data', 'fn.db')}`;
}

export function compileConfig(env: Env = process.env, cwd: string = process.cwd()): Config {
  const rawType = read(env, 'FN_NODE_TYPE')?.toLowerCase();
  if (rawType !== undefined && PLANNED_NODE_TYPES.includes(rawType)) {
    throw new ConfigError(`FN_NODE_TYPE=${rawType} is not available in this fnts release; use one of: ${NODE_TYPES.join(', ')}`);
  }
  const publicUrl = read(env, 'FN_PUBLIC_LB_URL');
  if (publicUrl !== undefined && !/^https?:\/\/[^/\s]+/.test(publicUrl)) {
    throw new ConfigError(`FN_PUBLIC_LB_URL=${publicUrl} is not an http(s) URL; use e.g. https://fn.example.com`);
  }
  const dbUrl = read(env, 'FN_DB_URL') ?? defaultDbUrl(cwd);
  let db: DbLocation;
  try {
    db = parseDbUrl(dbUrl, cwd);
  } catch (err) {
    if (err instanceof DbUrlError) throw new ConfigError(err.message);
    throw err;
  }
  // A pure runner keeps no database: without FN_DB_URL it does not claim the
  // default data directory (a full node's, started from the same folder), but
  // is known by its gRPC port on this host, stable across its restarts.
  const runnerByPort = rawType === 'pure-runner' && read(env, 'FN_DB_URL') === undefined;
  const ownedBy = runnerByPort ? `pure-runner:${hostname()}:${integer(env, 'FN_GRPC_PORT', 9190, 0, 65535)}` : canonicalDbLocation(dbUrl, cwd);
  const owner = createHash('sha256').update(ownedBy).digest('hex').slice(0, 12);
  const iofsPath = resolve(cwd, read(env, 'FN_IOFS_PATH') ?? join(tmpdir(), 'fnts', owner));
  const containerTag = read(env, 'FN_CONTAINER_LABEL_TAG');
  if (containerTag !== undefined && !/^[A-Za-z0-9_.-]{1,63}$/.test(containerTag)) {
    throw new ConfigError(`FN_CONTAINER_LABEL_TAG=${containerTag} is not a valid label value; use up to 63 letters, digits, '.', '_' or '-'`);
  }
  // Socket paths are limited to 107 bytes: <iofs>/<8-char instance>/<26-char id>/lsnr.sock must fit (agent/owner.ts).
  if (Buffer.byteLength(iofsPath) + 47 > 107) {
    throw new ConfigError(`FN_IOFS_PATH=${iofsPath} is too long for unix sockets (at most 60 bytes); use a shorter folder, e.g. /tmp/fnts`);
  }
  const maxBytes = Number.MAX_SAFE_INTEGER;
  const nodeType = oneOf(env, 'FN_NODE_TYPE', NODE_TYPES, 'full');
  const fleet = fleetSettings(env, nodeType, cwd);
  const pool = poolSettings(env, nodeType, fleet);
  const config: Config = Object.freeze({
    nodeType,
    port: integer(env, 'FN_PORT', 8080, 0, 65535),
    listenHost: read(env, 'FN_LISTEN_HOST') ?? '0.0.0.0',
    dbUrl,
    db,
    dbPoolSize: integer(env, 'FNTS_DB_POOL_SIZE', 10, 1, 1000),
    dataDir: dataDir(env, db, cwd),
    secretKey: secretKey(env),
    logLevel: oneOf(env, 'FN_LOG_LEVEL', LOG_LEVELS, 'info'),
    logFormat: oneOf(env, 'FN_LOG_FORMAT', LOG_FORMATS, 'json'),
    publicUrl: publicUrl?.replace(/\/+$/, ''),
    maxApiBodyBytes: integer(env, 'FN_MAX_API_BODY_SIZE', 1024 * 1024, 1024, 64 * 1024 * 1024),
    drainTimeoutMs: msecs(env, 'FNTS_DRAIN_TIMEOUT_MSECS', 25_000, 0),
    agent: Object.freeze({
      freezeIdleMs: optionalMsecs(env, 'FN_FREEZE_IDLE_MSECS', 50),
      ejectIdleMs: msecs(env, 'FN_EJECT_IDLE_MSECS', 1000, 0),
      keepAlivePolicy: oneOf(env, 'FNTS_KEEPALIVE_POLICY', ['fixed', 'histogram'] as const, 'histogram'),
      keepAliveBinMs: msecs(env, 'FNTS_KEEPALIVE_BIN_MSECS', 10_000, 100, 3600_000),
      hotPollMs: msecs(env, 'FN_HOT_POLL_MSECS', 200, 10, 60_000),
      hotStartTimeoutMs: msecs(env, 'FN_HOT_START_TIMEOUT_MSECS', 5000, 1),
      hotPullTimeoutMs: msecs(env, 'FN_HOT_PULL_TIMEOUT_MSECS', 10 * 60_000, 1),
      maxResponseBytes: integer(env, 'FN_MAX_RESPONSE_SIZE', 0, 0, maxBytes),
      maxRequestBytes: integer(env, 'FN_MAX_REQUEST_SIZE', 0, 0, maxBytes),
      maxLogBytes: integer(env, 'FN_MAX_LOG_SIZE_BYTES', 1024 * 1024, 0, maxBytes),
      maxTotalMemoryBytes: integer(env, 'FN_MAX_TOTAL_MEMORY_BYTES', 0, 0, maxBytes),
      maxTotalCpuMillis: integer(env, 'FN_MAX_TOTAL_CPU_MCPUS', 0, 0, 1_000_000),
      nonBlockingResources: flag(env, 'FN_ENABLE_NB_RESOURCE_TRACKER'),
      iofsPath,
      iofsTmpfs: iofsTmpfs(env),
      dockerNetworks: (read(env, 'FN_DOCKER_NETWORKS') ?? '').split(/[\s,]+/).filter(Boolean),
      functionNetwork: oneOf(env, 'FNTS_FUNCTION_NETWORK', ['isolated', 'open'] as const, 'isolated'),
      functionNetworkName: networkName(env),
      functionNetworkBlock: blockedRanges(env),
      maxPids: integer(env, 'FN_MAX_PIDS', 50, 1, 1_000_000),
      maxOpenFiles: integer(env, 'FN_MAX_OPEN_FILES', 350, 16, 1_048_576),
      readOnlyRootfs: !flag(env, 'FN_DISABLE_READONLY_ROOTFS'),
      unprivileged: !flag(env, 'FN_DISABLE_UNPRIVILEGED_CONTAINERS'),
      statsIntervalMs: statsInterval(env),
      launchPolicy: oneOf(env, 'FNTS_LAUNCH_POLICY', ['adaptive', 'seed'] as const, 'adaptive'),
      owner,
      containerTag,
    }),
    mqUrl: mqUrl(env),
    detached: detachedSettings(env),
    callRecords: oneOf(env, 'FNTS_CALL_RECORDS', ['on', 'off'] as const, 'on') === 'on',
    metrics: oneOf(env, 'FNTS_METRICS', ['on', 'off'] as const, 'on') === 'on',
    consoleFleet: consoleFleet(env, nodeType),
    otlpTracesUrl: otlpTracesUrl(env),
    otlpProtocol: otlpProtocol(env),
    otelServiceName: read(env, 'OTEL_SERVICE_NAME') ?? 'fnts',
    otelSampler: {
      kind: oneOf(env, 'OTEL_TRACES_SAMPLER', TRACE_SAMPLERS, 'parentbased_always_on'),
      ratio: samplerRatio(env),
    },
    callRetentionMs: duration(env, 'FN_CALL_RETENTION', 7 * 24 * 3600_000),
    callRetentionPerFn: integer(env, 'FNTS_CALL_RETENTION_PER_FN', 10_000, 1, 100_000_000),
    ...requestTimeouts(env),
    fleet,
    pool,
    auth: authSettings(env),
  });
  // Last: every value is valid, so the message is about this choice only.
  requireFleetSecurity(nodeType, fleet, pool);
  return config;
}

const SERVICE_ACCOUNT = '/var/run/secrets/kubernetes.io/serviceaccount';

function poolSettings(env: Env, nodeType: NodeType, fleet: FleetSettings): PoolSettings {
  const minRunners = integer(env, 'FNTS_MIN_RUNNERS', 1, 0, 10_000);
  const maxRunners = integer(env, 'FNTS_MAX_RUNNERS', 10, 1, 10_000);
  if (minRunners > maxRunners) throw new ConfigError(`FNTS_MIN_RUNNERS=${minRunners} is more than FNTS_MAX_RUNNERS=${maxRunners}; use at most ${maxRunners}`);
  const iofsPath = resolve(read(env, 'FNTS_POOL_IOFS_PATH') ?? '/tmp/fnts-pool');
  if (Buffer.byteLength(iofsPath) > 40) throw new ConfigError(`FNTS_POOL_IOFS_PATH=${iofsPath} is too long for the runners' unix sockets (at most 40 bytes); use e.g. /tmp/fnts-pool`);
  const name = read(env, 'FNTS_POOL_NAME') ?? 'fnts';
  if (!/^[A-Za-z0-9_.-]{1,63}$/.test(name)) throw new ConfigError(`FNTS_POOL_NAME=${name} is not a valid label value; use up to 63 letters, digits, '.', '_' or '-'`);
  const k8sApiUrl = read(env, 'FNTS_K8S_API_URL')?.replace(/\/+$/, '');
  const controlPlane = oneOf(env, 'FNTS_CONTROL_PLANE', ['docker', 'swarm', 'kubernetes'] as const, 'docker');
  const kubeconfig = read(env, 'KUBECONFIG') ?? join(homedir(), '.kube', 'config');
  if (nodeType === 'poolmanager' && controlPlane === 'kubernetes' && k8sApiUrl === undefined && read(env, 'KUBERNETES_SERVICE_HOST') === undefined && !existsSync(kubeconfig.split(delimiter)[0]!)) {
    throw new ConfigError(
      'FNTS_CONTROL_PLANE=kubernetes needs a cluster: run the manager in a pod (its service account is used), or give it a kubeconfig (KUBECONFIG or ~/.kube/config), or set FNTS_K8S_API_URL',
    );
  }
  let namespace = read(env, 'FNTS_K8S_NAMESPACE');
  if (namespace === undefined) {
    try {
      namespace = readFileSync(join(SERVICE_ACCOUNT, 'namespace'), 'utf8').trim();
    } catch {
      namespace = 'default';
    }
  }
  const k8sTlsSecret = read(env, 'FNTS_K8S_TLS_SECRET');
  if (k8sTlsSecret !== undefined && !/^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$/.test(k8sTlsSecret)) {
    throw new ConfigError(`FNTS_K8S_TLS_SECRET=${k8sTlsSecret} is not a Secret's name; use lower case letters, digits, '-' and '.', e.g. fnts-poolmanager-tls`);
  }
  if (nodeType === 'poolmanager' && controlPlane === 'kubernetes' && fleet.tls && k8sTlsSecret === undefined) {
    throw new ConfigError(
      'FNTS_CONTROL_PLANE=kubernetes with FNTS_GRPC_TLS_* needs FNTS_K8S_TLS_SECRET: the Secret (keys tls.crt, tls.key, ca.crt) each runner pod mounts for its certificate, e.g. the one these files come from',
    );
  }
  return Object.freeze({
    grpcPort: integer(env, 'FN_GRPC_PORT', 9191, 0, 65535),
    controlPlane,
    runnerImage: read(env, 'FNTS_RUNNER_IMAGE') ?? 'fnts/fnts:latest',
    name,
    runnerMemMb: integer(env, 'FNTS_RUNNER_MEMORY_MB', 4096, 128, 16 * 1024 * 1024),
    minRunners,
    maxRunners,
    predictor: oneOf(env, 'FNTS_PREDICTOR', ['conservative', 'forecast'] as const, 'forecast'),
    requirementTtlMs: msecs(env, 'FNTS_REQUIREMENT_TTL_MSECS', 5000, 100, 3600_000),
    tickMs: msecs(env, 'FNTS_SCALE_TICK_MSECS', 1000, 50, 600_000),
    runnerStartMs: msecs(env, 'FNTS_RUNNER_START_MSECS', 5000, 0, 3600_000),
    startTimeoutMs: msecs(env, 'FNTS_RUNNER_START_TIMEOUT_MSECS', 120_000, 1000, 3600_000),
    drainGraceMs: msecs(env, 'FNTS_DRAIN_GRACE_MSECS', 3000, 0, 3600_000),
    maxDrainMs: msecs(env, 'FNTS_MAX_DRAIN_MSECS', 600_000, 1000, 24 * 3600_000),
    maxProvisionPerTick: integer(env, 'FNTS_MAX_PROVISION', 20, 1, 1000),
    iofsPath,
    publishHost: read(env, 'FNTS_RUNNER_PUBLISH_HOST'),
    runnerPorts: portRange(env, 'FNTS_RUNNER_PORT_RANGE', nodeType, controlPlane, maxRunners),
    engine: engineAddress(env),
    swarmNetwork: read(env, 'FNTS_SWARM_NETWORK'),
    k8sApiUrl,
    k8sNamespace: namespace,
    k8sTlsSecret,
  });
}

/** DOCKER_HOST, as docker's own client reads it: unset is the local engine's socket. */
function engineAddress(env: Env): EngineAddress {
  const raw = read(env, 'DOCKER_HOST');
  if (raw === undefined) return { kind: 'unix', path: '/var/run/docker.sock' };
  if (raw.startsWith('unix://')) {
    const path = raw.slice('unix://'.length) || '/var/run/docker.sock';
    if (path.startsWith('/')) return { kind: 'unix', path };
  }
  const tcp = /^tcp:\/\/(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9.-]+)(?::(\d{1,5}))?\/?$/.exec(raw);
  const port = Number(tcp?.[2] ?? 2375);
  if (tcp && port >= 1 && port <= 65535) {
    return { kind: 'tcp', host: tcp[1]!.replace(/^\[|\]$/g, ''), port, tls: read(env, 'DOCKER_TLS_VERIFY') !== undefined || read(env, 'DOCKER_CERT_PATH') !== undefined };
  }
  // ssh://, npipe://, ...: the Docker driver's client takes what it can; the pool manager's planes refuse what they cannot give runners.
  return { kind: 'other', url: raw };
}

/**
 * FNTS_RUNNER_PORT_RANGE: `first-last`. Only the docker plane publishes
 * runners on ports of its choosing; a range smaller than a group's most
 * runners could never hold that group.
 */
function portRange(env: Env, name: string, nodeType: NodeType, plane: ControlPlaneKind, maxRunners: number): PortRange | undefined {
  const raw = read(env, name);
  if (raw === undefined) return undefined;
  const m = /^(\d{1,5})-(\d{1,5})$/.exec(raw);
  const first = Number(m?.[1]);
  const last = Number(m?.[2]);
  if (!m || first < 1 || last > 65535 || first > last) throw new ConfigError(`${name}=${raw} is not a range of ports; use first-last, e.g. 9200-9299`);
  if (nodeType !== 'poolmanager') return { first, last };
  if (plane !== 'docker') throw new ConfigError(`${name} applies to the docker control plane only (FNTS_CONTROL_PLANE=${plane} publishes runners its own way); unset it`);
  const size = last - first + 1;
  if (size < maxRunners) throw new ConfigError(`${name}=${raw} holds ${size} port(s), fewer than FNTS_MAX_RUNNERS=${maxRunners}; widen it or lower FNTS_MAX_RUNNERS`);
  return { first, last };
}

/** host:port, with a port. */
function isHostPort(text: string): boolean {
  const m = /^(\[[0-9a-fA-F:.]+\]|[A-Za-z0-9.-]+):(\d{1,5})$/.exec(text);
  return m !== null && Number(m[2]) > 0 && Number(m[2]) <= 65535;
}

/** A file's absolute path (a pool manager hands its TLS files to runners by path), once it can be read. */
function readableFile(env: Env, name: string, cwd: string): string | undefined {
  const given = read(env, name);
  if (given === undefined) return undefined;
  const path = resolve(cwd, given);
  try {
    accessSync(path, fsConstants.R_OK);
  } catch {
    throw new ConfigError(`${name}=${given} cannot be read; give the path of a PEM file this process can read`);
  }
  return path;
}

/** FNTS_GRPC_TLS_RUNNER_NAME: a DNS name or an IP address, as a certificate's subject alternative names hold them. */
function runnerName(env: Env): string | undefined {
  const name = read(env, 'FNTS_GRPC_TLS_RUNNER_NAME');
  if (name === undefined) return undefined;
  if (isIP(name) === 0 && !/^(?=.{1,253}$)[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?(\.[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*$/.test(name)) {
    throw new ConfigError(`FNTS_GRPC_TLS_RUNNER_NAME=${name} is not a DNS name or an IP address; use a name the runners' certificate carries, e.g. poolmanager`);
  }
  return name;
}

function fleetSettings(env: Env, nodeType: NodeType, cwd: string): FleetSettings {
  const runnerAddresses = (read(env, 'FN_RUNNER_ADDRESSES') ?? '')
    .split(',')
    .map((a) => a.trim())
    .filter(Boolean);
  for (const a of runnerAddresses) {
    if (!isHostPort(a)) throw new ConfigError(`FN_RUNNER_ADDRESSES has ${a}, which is not host:port; list the runners' gRPC addresses, e.g. 10.0.0.5:9190,10.0.0.6:9190`);
  }
  const runnerApiUrl = read(env, 'FN_RUNNER_API_URL')?.replace(/\/+$/, '');
  if (runnerApiUrl !== undefined && !/^https?:\/\/[^/\s]+/.test(runnerApiUrl)) {
    throw new ConfigError(`FN_RUNNER_API_URL=${runnerApiUrl} is not an http(s) URL; use the API node's address, e.g. http://fn-api:8080`);
  }
  const npmAddress = read(env, 'FN_NPM_ADDRESS');
  if (npmAddress !== undefined && !isHostPort(npmAddress)) {
    throw new ConfigError(`FN_NPM_ADDRESS=${npmAddress} is not host:port; give the pool manager's gRPC address, e.g. fn-npm:9190`);
  }
  if (nodeType === 'lb') {
    if (runnerApiUrl === undefined) throw new ConfigError('FN_NODE_TYPE=lb needs FN_RUNNER_API_URL, the API node it reads apps and fns from (e.g. http://fn-api:8080)');
    if (runnerAddresses.length === 0 && npmAddress === undefined) {
      throw new ConfigError(
        "FN_NODE_TYPE=lb needs FN_RUNNER_ADDRESSES, the runners it places calls on (host:port of each pure runner's FN_GRPC_PORT, comma separated), or FN_NPM_ADDRESS, a pool manager that lists them",
      );
    }
    if (runnerAddresses.length > 0 && npmAddress !== undefined) {
      throw new ConfigError(
        'FN_RUNNER_ADDRESSES and FN_NPM_ADDRESS both set: an LB takes its runners from one of them; keep FN_RUNNER_ADDRESSES for a fixed list, or FN_NPM_ADDRESS for the runners a pool manager lists',
      );
    }
  }
  const cert = readableFile(env, 'FNTS_GRPC_TLS_CERT', cwd);
  const key = readableFile(env, 'FNTS_GRPC_TLS_KEY', cwd);
  const ca = readableFile(env, 'FNTS_GRPC_TLS_CA', cwd);
  const given = [cert, key, ca].filter((x) => x !== undefined).length;
  if (given !== 0 && given !== 3) {
    throw new ConfigError('FNTS_GRPC_TLS_CERT, FNTS_GRPC_TLS_KEY and FNTS_GRPC_TLS_CA go together: set all three (mutual TLS between LBs, runners and the pool manager) or none (plaintext)');
  }
  const name = runnerName(env);
  if (name !== undefined && given === 0)
    throw new ConfigError('FNTS_GRPC_TLS_RUNNER_NAME checks runners under mutual TLS: set FNTS_GRPC_TLS_CERT, FNTS_GRPC_TLS_KEY and FNTS_GRPC_TLS_CA too, or unset it');
  return Object.freeze({
    grpcPort: integer(env, 'FN_GRPC_PORT', 9190, 0, 65535),
    runnerApiUrl,
    runnerAddresses: Object.freeze(runnerAddresses),
    npmAddress,
    npmPollMs: msecs(env, 'FNTS_NPM_POLL_MSECS', 1000, 50, 600_000),
    npmAdvertiseMs: msecs(env, 'FNTS_NPM_ADVERTISE_MSECS', 1000, 50, 600_000),
    placer: oneOf(env, 'FN_PLACER', ['naive', 'ch', 'wait'] as const, 'wait'),
    lbCacheMs: msecs(env, 'FNTS_LB_CACHE_MSECS', 1000, 0, 3600_000),
    tls: cert && key && ca ? Object.freeze({ cert, key, ca, runnerName: name }) : undefined,
    grpcListenHost: read(env, 'FNTS_GRPC_LISTEN_HOST') ?? '0.0.0.0',
    insecure: flag(env, 'FNTS_GRPC_INSECURE'),
  });
}

/**
 * Plaintext gRPC where the network reaches it is refused unless the operator
 * says it is a private network (FNTS_GRPC_INSECURE=true): a runner runs
 * whatever image a TryCall names and holds the engine's socket, so its port
 * in plaintext is root on its host for whoever reaches it. Loopback stays
 * allowed (one-machine fleets, tests).
 */
function requireFleetSecurity(nodeType: NodeType, fleet: FleetSettings, pool: PoolSettings): void {
  if (fleet.tls || fleet.insecure) return;
  if (nodeType !== 'pure-runner' && nodeType !== 'poolmanager') return;
  const port = nodeType === 'pure-runner' ? 'the runner protocol (FN_GRPC_PORT), which runs any image a caller names,' : "the pool manager's gRPC port (FN_GRPC_PORT)";
  if (!isLoopbackHost(fleet.grpcListenHost)) {
    throw new ConfigError(
      `FN_NODE_TYPE=${nodeType} would serve ${port} in plaintext on ${fleet.grpcListenHost} (FNTS_GRPC_LISTEN_HOST), where anyone who reaches it could use it: ` +
        'set FNTS_GRPC_TLS_CERT, FNTS_GRPC_TLS_KEY and FNTS_GRPC_TLS_CA for mutual TLS (fnts certs makes them), or FNTS_GRPC_LISTEN_HOST=127.0.0.1 to keep it to this machine, ' +
        'or FNTS_GRPC_INSECURE=true to accept plaintext on a private network',
    );
  }
  if (nodeType !== 'poolmanager') return;
  // A docker plane's runners published on loopback only are this machine's; any other runners are on the network.
  const reachable =
    pool.controlPlane === 'docker'
      ? isLoopbackHost(pool.publishHost ?? '127.0.0.1')
        ? undefined
        : `published on ${pool.publishHost} (FNTS_RUNNER_PUBLISH_HOST)`
      : pool.controlPlane === 'swarm'
        ? pool.swarmNetwork
          ? `on the swarm network ${pool.swarmNetwork}`
          : "published on every swarm node's addresses"
        : 'at their pod addresses';
  if (reachable === undefined) return;
  throw new ConfigError(
    `FNTS_CONTROL_PLANE=${pool.controlPlane} would start runners serving the runner protocol in plaintext ${reachable}, where anyone who reaches them could run any image on their hosts: ` +
      'set FNTS_GRPC_TLS_CERT, FNTS_GRPC_TLS_KEY and FNTS_GRPC_TLS_CA for mutual TLS (the runners get the same files; fnts certs makes them), ' +
      `${pool.controlPlane === 'docker' ? 'or FNTS_RUNNER_PUBLISH_HOST=127.0.0.1 to keep them to this machine, ' : ''}or FNTS_GRPC_INSECURE=true to accept plaintext on a private network`,
  );
}

/** FN_MQ_URL: unset for the embedded queue, or redis://[user:pass@]host[:port][/db] (rediss:// for TLS). */
/** The standard OTEL_TRACES_SAMPLER values fnts supports. */
export const TRACE_SAMPLERS = ['always_on', 'always_off', 'traceidratio', 'parentbased_always_on', 'parentbased_always_off', 'parentbased_traceidratio'] as const;
export type TraceSampler = (typeof TRACE_SAMPLERS)[number];

function samplerRatio(env: Env): number {
  const raw = read(env, 'OTEL_TRACES_SAMPLER_ARG');
  if (raw === undefined) return 1;
  const ratio = Number(raw);
  if (!Number.isFinite(ratio) || ratio < 0 || ratio > 1) throw new ConfigError(`OTEL_TRACES_SAMPLER_ARG=${raw} is not a ratio between 0 and 1 (0.1 traces one call in ten)`);
  return ratio;
}

/** The OTLP encodings fnts exports spans in (OTLP over gRPC is not one of them). */
export const OTLP_PROTOCOLS = ['http/protobuf', 'http/json'] as const;
export type OtlpProtocol = (typeof OTLP_PROTOCOLS)[number];

function otlpProtocol(env: Env): OtlpProtocol {
  const name = read(env, 'OTEL_EXPORTER_OTLP_TRACES_PROTOCOL') !== undefined ? 'OTEL_EXPORTER_OTLP_TRACES_PROTOCOL' : 'OTEL_EXPORTER_OTLP_PROTOCOL';
  if (read(env, name)?.toLowerCase() === 'grpc')
    throw new ConfigError(`${name}=grpc is not supported: fnts sends spans over OTLP/HTTP; use http/protobuf (the default) or http/json, and the receiver's HTTP port (4318)`);
  return oneOf(env, name, OTLP_PROTOCOLS, 'http/protobuf');
}

function otlpTracesUrl(env: Env): string | undefined {
  const traces = read(env, 'OTEL_EXPORTER_OTLP_TRACES_ENDPOINT');
  const base = read(env, 'OTEL_EXPORTER_OTLP_ENDPOINT');
  const [name, url] = traces !== undefined ? ['OTEL_EXPORTER_OTLP_TRACES_ENDPOINT', traces] : base !== undefined ? ['OTEL_EXPORTER_OTLP_ENDPOINT', `${base.replace(/\/+$/, '')}/v1/traces`] : [];
  if (name === undefined || url === undefined) return undefined;
  let scheme = '';
  try {
    scheme = new URL(url).protocol;
  } catch {
    // reported below
  }
  if (scheme !== 'http:' && scheme !== 'https:')
    throw new ConfigError(`${name}=${traces ?? base} is not an http(s) URL; use e.g. http://localhost:4318 (an OTLP/HTTP receiver), or leave it unset to turn tracing off`);
  return url;
}

const MAX_FLEET_NODES = 64;

/** FNTS_CONSOLE_FLEET: each node's base URL as `scheme://host:port`, in the order given, each once. */
function consoleFleet(env: Env, nodeType: NodeType): readonly string[] {
  const raw = read(env, 'FNTS_CONSOLE_FLEET');
  if (raw === undefined) return Object.freeze([]);
  if (nodeType !== 'api' && nodeType !== 'full') {
    throw new ConfigError(`FNTS_CONSOLE_FLEET is read by the console of an API or full node only; unset it for FN_NODE_TYPE=${nodeType}`);
  }
  const urls = new Set<string>();
  for (const item of raw
    .split(',')
    .map((s) => s.trim())
    .filter(Boolean)) {
    let url: URL | undefined;
    try {
      url = new URL(item);
    } catch {
      // reported below
    }
    const plain = url && (url.protocol === 'http:' || url.protocol === 'https:') && url.username === '' && url.password === '' && url.search === '' && url.hash === '' && url.pathname === '/';
    if (!url || !plain) {
      throw new ConfigError(
        `FNTS_CONSOLE_FLEET has ${item}, which is not a node's base URL; list the HTTP port (FN_PORT) of each LB, pure runner and pool manager, e.g. http://10.0.0.5:8080,http://10.0.0.6:8080`,
      );
    }
    urls.add(url.origin);
  }
  if (urls.size > MAX_FLEET_NODES) throw new ConfigError(`FNTS_CONSOLE_FLEET names ${urls.size} nodes; the console reads at most ${MAX_FLEET_NODES}`);
  return Object.freeze([...urls]);
}

function mqUrl(env: Env): string | undefined {
  const raw = read(env, 'FN_MQ_URL');
  if (raw === undefined) return undefined;
  let scheme = '';
  try {
    scheme = new URL(raw).protocol;
  } catch {
    // reported below
  }
  if (scheme !== 'redis:' && scheme !== 'rediss:') {
    throw new ConfigError(`FN_MQ_URL=${raw.replace(/\/\/[^@/]*@/, '//***@')} is not supported; use redis://host:6379/0, or leave it unset for the queue in the server's own database`);
  }
  return raw;
}

const DURATION_UNITS: Readonly<Record<string, number>> = { ms: 1, s: 1000, m: 60_000, h: 3600_000, d: 24 * 3600_000 };

/** A duration as Go writes them (168h, 1h30m, 45s) or in 'd' days, or whole seconds; at least a second. */
function duration(env: Env, name: string, fallback: number): number {
  const raw = read(env, name);
  if (raw === undefined) return fallback;
  let ms = NaN;
  if (/^\d+$/.test(raw)) ms = Number(raw) * 1000;
  else if (/^(\d+(\.\d+)?(ms|s|m|h|d))+$/.test(raw)) {
    ms = 0;
    for (const [, n, , unit] of raw.matchAll(/(\d+(\.\d+)?)(ms|s|m|h|d)/g)) ms += Number(n) * DURATION_UNITS[unit!]!;
  }
  if (!Number.isFinite(ms) || ms < 1000) throw new ConfigError(`${name}=${raw} is not a duration of at least a second; use e.g. 168h, 7d, 30m or a number of seconds`);
  return ms;
}

/**
 * A stalled or trickling upload must not hold its socket (and what waits on
 * its body) for Node's default of five minutes: both bounds default to well
 * under a minute.
 */
function requestTimeouts(env: Env): Pick<Config, 'requestHeadersTimeoutMs' | 'requestTimeoutMs'> {
  const requestHeadersTimeoutMs = msecs(env, 'FNTS_REQUEST_HEADERS_TIMEOUT_MSECS', 10_000, 100, 3600_000);
  const requestTimeoutMs = msecs(env, 'FNTS_REQUEST_TIMEOUT_MSECS', 30_000, 100, 3600_000);
  if (requestHeadersTimeoutMs > requestTimeoutMs) {
    throw new ConfigError(
      `FNTS_REQUEST_HEADERS_TIMEOUT_MSECS=${requestHeadersTimeoutMs} is longer than FNTS_REQUEST_TIMEOUT_MSECS=${requestTimeoutMs}; the headers are part of the request, so use at most ${requestTimeoutMs}`,
    );
  }
  return { requestHeadersTimeoutMs, requestTimeoutMs };
}
