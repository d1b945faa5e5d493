/**
 * config/ — the one place that reads process.env.
 *
 * `compileConfig(env)` turns raw environment variables (Fn's names where Fn has
 * one) into a frozen, validated `Config`. A bad value fails fast at startup
 * with a `ConfigError` naming the variable, the value and what is accepted.
 */
import { resolve } from 'node:path';

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
  return Object.freeze({
    nodeType: oneOf(env, 'FN_NODE_TYPE', NODE_TYPES, 'full'),
    port: integer(env, 'FN_PORT', 8080, 0, 65535),
    listenHost: read(env, 'FN_LISTEN_HOST') ?? '0.0.0.0',
    dbUrl: read(env, 'FN_DB_URL') ?? defaultDbUrl(cwd),
    logLevel: oneOf(env, 'FN_LOG_LEVEL', LOG_LEVELS, 'info'),
    publicUrl: publicUrl?.replace(/\/+$/, ''),
    maxApiBodyBytes: integer(env, 'FN_MAX_API_BODY_SIZE', 1024 * 1024, 1024, 64 * 1024 * 1024),
  });
}
