/**
 * Pieces shared by every model: ids, timestamps, config maps.
 */
import { randomFillSync } from 'node:crypto';
import { ApiError, E, MAX_CONFIG_BYTES, MAX_CONFIG_KEY_BYTES, MAX_CONFIG_VALUE_BYTES } from './errors.js';

const CROCKFORD = '0123456789ABCDEFGHJKMNPQRSTVWXYZ';
const pool = Buffer.alloc(4096);
let poolAt = pool.length;
let lastTime = -1;
let lastTimePart = '';
const lastRandom = new Uint8Array(16);

/** 16 random base-32 digits, from a pool refilled 4 KB at a time (one syscall per 256 ids). */
function freshRandom(): void {
  if (poolAt + 16 > pool.length) {
    randomFillSync(pool);
    poolAt = 0;
  }
  for (let i = 0; i < 16; i++) lastRandom[i] = pool[poolAt++]! & 31;
}

/** Adds one to the random part, so ids made in the same millisecond still sort in order. */
function incrementRandom(): void {
  for (let i = 15; i >= 0; i--) {
    if (lastRandom[i]! < 31) {
      lastRandom[i]!++;
      return;
    }
    lastRandom[i] = 0;
  }
}

/**
 * A new id: 26 Crockford base-32 characters, 48 bits of millisecond time then
 * 80 random bits (the ULID layout, like Fn's ids): sortable by creation time,
 * monotonic within a millisecond. Made once per call, so it stays cheap.
 */
export function newId(): string {
  const now = Date.now();
  if (now === lastTime) {
    incrementRandom();
  } else {
    lastTime = now;
    freshRandom();
    let t = now;
    let time = '';
    for (let i = 0; i < 10; i++) {
      time = CROCKFORD[t % 32]! + time;
      t = Math.floor(t / 32);
    }
    lastTimePart = time;
  }
  let out = lastTimePart;
  for (let i = 0; i < 16; i++) out += CROCKFORD[lastRandom[i]!]!;
  return out;
}

/** Timestamps are UTC, RFC 3339 with milliseconds, as Fn writes them. */
export function now(): string {
  return new Date().toISOString();
}

let isoSecond = NaN;
let isoPrefix = '';

/**
 * `new Date(ms).toISOString()` for the times of calls, which come by the
 * thousand per second: the date and time up to the second are formatted
 * once per second (Date formatting costs over a microsecond), the
 * milliseconds appended.
 */
export function isoTime(ms: number): string {
  const second = Math.floor(ms / 1000);
  if (second !== isoSecond) {
    const iso = new Date(ms).toISOString();
    // Years outside 0000-9999 have a longer form: format those whole.
    if (iso.length !== 24) return iso;
    isoSecond = second;
    isoPrefix = iso.slice(0, 20);
  }
  const milli = Math.floor(ms) - second * 1000;
  return `${isoPrefix}${milli < 10 ? '00' : milli < 100 ? '0' : ''}${milli}Z`;
}

export type ConfigMap = Readonly<Record<string, string>>;

/**
 * Config entries become environment variables of the function's container, so
 * keys and values must be something an environment can hold: Docker refuses
 * to create a container whose environment has a NUL anywhere, and a key with
 * '=' would split differently. Refusing them here keeps a bad entry from
 * surfacing only later, as every call failing.
 */
export function validateConfig(config: ConfigMap, maxBytes = MAX_CONFIG_BYTES): void {
  let total = 0;
  for (const [key, value] of Object.entries(config)) {
    if (!isConfigKey(key)) throw new ApiError(E.InvalidConfigKey);
    if (value.includes('\0')) throw new ApiError(E.InvalidConfigValue);
    const keyBytes = byteLength(key);
    const valueBytes = byteLength(value);
    total += keyBytes + valueBytes;
    if (keyBytes > MAX_CONFIG_KEY_BYTES || valueBytes > MAX_CONFIG_VALUE_BYTES || total > maxBytes) throw new ApiError(E.ConfigTooLarge);
  }
}

/** A config key an environment can hold (non-empty, no '=' or NUL); its size is checked apart. Secrets' names follow it too. */
export function isConfigKey(key: string): boolean {
  return key !== '' && !key.includes('=') && !key.includes('\0');
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
export function mergeMap<V>(current: Readonly<Record<string, V>>, change: Readonly<Record<string, V>> | undefined, isDelete: (value: V) => boolean): Readonly<Record<string, V>> {
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
