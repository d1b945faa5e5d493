/**
 * Pieces shared by every model: ids, timestamps, config maps.
 */
import { monotonicFactory } from 'ulid';
import { ApiError, E } from './errors.js';

const ulid = monotonicFactory();

/** A new resource id: 26 characters, sortable by creation time (like Fn's ids). */
export function newId(): string {
  return ulid();
}

/** Timestamps are UTC, RFC 3339 with milliseconds, as Fn writes them. */
export function now(): string {
  return new Date().toISOString();
}

export type ConfigMap = Readonly<Record<string, string>>;

/**
 * Config entries become environment variables of the function's container, so
 * a key must be something an environment can hold.
 */
export function validateConfig(config: ConfigMap): void {
  for (const key of Object.keys(config)) {
    if (key === '' || key.includes('=') || key.includes('\0')) throw new ApiError(E.InvalidConfigKey);
  }
}

/** Applies a config update: an empty value removes the key. */
export function mergeConfig(current: ConfigMap, change: ConfigMap | undefined): ConfigMap {
  return mergeMap(current, change, (value) => value === '');
}

/**
 * Merges `change` into `current`; entries whose value `isDelete` are removed.
 * Built with Object.fromEntries so that a key such as "__proto__" stays an
 * ordinary entry instead of touching the object's prototype.
 */
export function mergeMap<V>(
  current: Readonly<Record<string, V>>,
  change: Readonly<Record<string, V>> | undefined,
  isDelete: (value: V) => boolean,
): Readonly<Record<string, V>> {
  if (change === undefined) return current;
  const next = new Map(Object.entries(current));
  for (const [key, value] of Object.entries(change)) {
    if (isDelete(value)) next.delete(key);
    else next.set(key, value);
  }
  return Object.fromEntries(next);
}

export function configEqual(a: ConfigMap, b: ConfigMap): boolean {
  const ka = Object.keys(a);
  return ka.length === Object.keys(b).length && ka.every((k) => b[k] === a[k]);
}

/** Letters, digits (any script), '_' and '-': the names Fn accepts for apps and triggers. */
export const WORD_NAME = /^[\p{L}\p{N}_-]+$/u;

/** Length as Go's len(): bytes of UTF-8. */
export function byteLength(s: string): number {
  return Buffer.byteLength(s, 'utf8');
}
