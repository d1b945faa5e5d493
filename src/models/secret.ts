/**
 * Secrets: values an app or fn keeps apart from its config. A function gets
 * each secret of its app and of itself (the fn's wins) as a read-only file
 * /run/secrets/<name>; the API takes a value and never shows it again (only
 * names and times), the database keeps it encrypted (datastore/secret-box.ts).
 * Fn has no secrets: its API and CLI, and config, are untouched by them.
 */
import { byteLength, isConfigKey } from './common.js';
import { optString, type JsonObject } from './decode.js';
import { ApiError, E, MAX_SECRET_NAME_BYTES, MAX_SECRET_VALUE_BYTES } from './errors.js';

/** Whose secret: an app's (every fn of it gets it) or one fn's. */
export interface SecretOwner {
  readonly kind: 'app' | 'fn';
  readonly id: string;
}

/** What is shown of a secret: never its value. */
export interface SecretInfo {
  readonly name: string;
  readonly created_at: string;
  readonly updated_at: string;
  /**
   * Changes with every write of the value (random, not derived from it):
   * what tells containers made before a change from those made after.
   * Not shown by the API.
   */
  readonly version: string;
}

/**
 * A secret's name is a config key (non-empty, no '=' or NUL) and a file
 * name in /run/secrets: so no '/', not '.' or '..', at most 255 bytes.
 * Anything else would name a file elsewhere, or none.
 */
export function validateSecretName(name: string): void {
  if (!isConfigKey(name) || name.includes('/') || name === '.' || name === '..' || byteLength(name) > MAX_SECRET_NAME_BYTES) throw new ApiError(E.InvalidSecretName);
}

/** The value of a `{"value": "..."}` body: a string of at most 64 KiB (UTF-8). */
export function secretValueFromJson(body: JsonObject): Buffer {
  const value = optString(body, 'value');
  if (value === undefined) throw new ApiError(E.MissingSecretValue);
  const bytes = Buffer.from(value, 'utf8');
  if (bytes.length > MAX_SECRET_VALUE_BYTES) throw new ApiError(E.SecretTooLarge);
  return bytes;
}

/** A secret as the API shows it: its name and times. */
export function secretToJson(s: SecretInfo): { name: string; created_at: string; updated_at: string } {
  return { name: s.name, created_at: s.created_at, updated_at: s.updated_at };
}
