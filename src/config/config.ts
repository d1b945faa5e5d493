/**
 * config/ — the one place that reads process.env.
 *
 * `compileConfig(env)` turns raw environment variables (Fn's names where Fn has
 * one) into a frozen, validated `Config`. A bad value fails fast at startup
 * with a `ConfigError` naming the variable, the value and what is accepted.
 */
import { createHash } from 'node:crypto';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';

export type NodeType = 'full' | 'api';
export type LogLevel = 'trace' | 'debug' | 'info' | 'warn' | 'error' | 'fatal' | 'silent';

export interface Config {
  /** FN_NODE_TYPE: which role this process plays. */
  readonly nodeType: NodeType;
  /** FN_PORT: HTTP port of the API and invoke endpoints. */
  readonly port: number;
  /** FN_LISTEN_HOST: address to bind (default all interfaces). */
  readonly listenHost: string;
  /** FN_DB_URL as given, e.g. `sqlite3:///var/lib/fnts/fn.db`. */
  readonly dbUrl: string;
  /** FN_LOG_LEVEL */
  readonly logLevel: LogLevel;
  /**
   * FN_PUBLIC_LB_URL: base URL put into the invoke/trigger endpoint
   * annotations; when unset the request's own scheme and host are used.
   */
  readonly publicUrl: string | undefined;
  /** Largest JSON body accepted by the management API, in bytes. */
  readonly maxApiBodyBytes: number;
  readonly agent: AgentSettings;
}

/** Settings of the agent and its container driver (Fn's names and defaults). */
export interface AgentSettings {
  /** FN_FREEZE_IDLE_MSECS (50); negative disables freezing (Infinity). */
  readonly freezeIdleMs: number;
  /** FN_EJECT_IDLE_MSECS (1000) */
  readonly ejectIdleMs: number;
  /** FN_HOT_POLL_MSECS (200) */
  readonly hotPollMs: number;
  /** FN_HOT_START_TIMEOUT_MSECS (5000) */
  readonly hotStartTimeoutMs: number;
  /** FN_HOT_PULL_TIMEOUT_MSECS (10 minutes) */
  readonly hotPullTimeoutMs: number;
  /** FN_MAX_RESPONSE_SIZE bytes; 0 = no limit. */
  readonly maxResponseBytes: number;
  /** FN_MAX_REQUEST_SIZE bytes; 0 = no limit. */
  readonly maxRequestBytes: number;
  /** FN_MAX_TOTAL_MEMORY_BYTES; 0 = what the host allows. */
  readonly maxTotalMemoryBytes: number;
  /** FN_MAX_TOTAL_CPU_MCPUS; 0 = what the host allows. */
  readonly maxTotalCpuMillis: number;
  /** FN_ENABLE_NB_RESOURCE_TRACKER */
  readonly nonBlockingResources: boolean;
  /** FN_IOFS_PATH: host folder for the containers' sockets; default derived from FN_DB_URL. */
  readonly iofsPath: string;
  /** FN_DOCKER_NETWORKS (space or comma separated) */
  readonly dockerNetworks: readonly string[];
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
  /** FNTS_LAUNCH_POLICY: 'adaptive' (default) or 'seed' (seed 001's rule, for comparison). */
  readonly launchPolicy: 'adaptive' | 'seed';
  /** Identity of this server's containers: a hash of its database URL, stable across restarts. */
  readonly instance: string;
}

export class ConfigError extends Error {
  override readonly name = 'ConfigError';
}

const NODE_TYPES: readonly NodeType[] = ['full', 'api'];
/** Roles Fn has that later fnts releases add; named so the error can say so. */
const PLANNED_NODE_TYPES = ['lb', 'pure-runner', 'runner', 'poolmanager'];
const LOG_LEVELS: readonly LogLevel[] = ['trace', 'debug', 'info', 'warn', 'error', 'fatal', 'silent'];

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

function msecs(env: Env, name: string, fallback: number): number {
  const raw = read(env, name);
  if (raw === undefined) return fallback;
  if (!/^-?\d+$/.test(raw)) throw new ConfigError(`${name}=${raw} is not a whole number of milliseconds`);
  const value = Number(raw);
  // As in Fn: a negative value disables the timer.
  return value < 0 ? Infinity : value;
}

/** 0 or negative disables sampling; otherwise at least 50 ms. */
function statsInterval(env: Env): number {
  const ms = msecs(env, 'FNTS_STATS_INTERVAL_MSECS', 1000);
  return ms <= 0 || ms === Infinity ? Infinity : Math.max(50, ms);
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
  const instance = createHash('sha256').update(dbUrl).digest('hex').slice(0, 12);
  const iofsPath = resolve(cwd, read(env, 'FN_IOFS_PATH') ?? join(tmpdir(), 'fnts', instance));
  // Socket paths are limited to 107 bytes: <iofs>/<26-char id>/lsnr.sock must fit.
  if (Buffer.byteLength(iofsPath) + 38 > 107) {
    throw new ConfigError(`FN_IOFS_PATH=${iofsPath} is too long for unix sockets (at most 69 bytes); use a shorter folder, e.g. /tmp/fnts`);
  }
  const maxBytes = Number.MAX_SAFE_INTEGER;
  return Object.freeze({
    nodeType: oneOf(env, 'FN_NODE_TYPE', NODE_TYPES, 'full'),
    port: integer(env, 'FN_PORT', 8080, 0, 65535),
    listenHost: read(env, 'FN_LISTEN_HOST') ?? '0.0.0.0',
    dbUrl,
    logLevel: oneOf(env, 'FN_LOG_LEVEL', LOG_LEVELS, 'info'),
    publicUrl: publicUrl?.replace(/\/+$/, ''),
    maxApiBodyBytes: integer(env, 'FN_MAX_API_BODY_SIZE', 1024 * 1024, 1024, 64 * 1024 * 1024),
    agent: Object.freeze({
      freezeIdleMs: msecs(env, 'FN_FREEZE_IDLE_MSECS', 50),
      ejectIdleMs: msecs(env, 'FN_EJECT_IDLE_MSECS', 1000),
      hotPollMs: Math.max(10, Math.min(msecs(env, 'FN_HOT_POLL_MSECS', 200), 60_000)),
      hotStartTimeoutMs: msecs(env, 'FN_HOT_START_TIMEOUT_MSECS', 5000),
      hotPullTimeoutMs: msecs(env, 'FN_HOT_PULL_TIMEOUT_MSECS', 10 * 60_000),
      maxResponseBytes: integer(env, 'FN_MAX_RESPONSE_SIZE', 0, 0, maxBytes),
      maxRequestBytes: integer(env, 'FN_MAX_REQUEST_SIZE', 0, 0, maxBytes),
      maxTotalMemoryBytes: integer(env, 'FN_MAX_TOTAL_MEMORY_BYTES', 0, 0, maxBytes),
      maxTotalCpuMillis: integer(env, 'FN_MAX_TOTAL_CPU_MCPUS', 0, 0, 1_000_000),
      nonBlockingResources: flag(env, 'FN_ENABLE_NB_RESOURCE_TRACKER'),
      iofsPath,
      dockerNetworks: (read(env, 'FN_DOCKER_NETWORKS') ?? '').split(/[\s,]+/).filter(Boolean),
      maxPids: integer(env, 'FN_MAX_PIDS', 50, 1, 1_000_000),
      maxOpenFiles: integer(env, 'FN_MAX_OPEN_FILES', 350, 16, 1_048_576),
      readOnlyRootfs: !flag(env, 'FN_DISABLE_READONLY_ROOTFS'),
      unprivileged: !flag(env, 'FN_DISABLE_UNPRIVILEGED_CONTAINERS'),
      statsIntervalMs: statsInterval(env),
      launchPolicy: oneOf(env, 'FNTS_LAUNCH_POLICY', ['adaptive', 'seed'] as const, 'adaptive'),
      instance,
    }),
  });
}
