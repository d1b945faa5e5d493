/**
 * Decoding of API request bodies with the typing rules Fn's users rely on
 * (Go's encoding/json): a field of the wrong JSON type is "Invalid JSON", a
 * `null` field counts as absent, unknown fields are ignored, field names match
 * case-insensitively (the last matching key wins).
 */
import { ApiError, E } from './errors.js';

export type JsonObject = Record<string, unknown>;

const invalidJson = (cause?: unknown): ApiError => new ApiError(E.InvalidJSON, { cause });

/**
 * Parses a request body that must hold one JSON object. An empty body or a
 * non-object (array, string, number) is Invalid JSON; a literal `null` is an
 * empty object, as in Go.
 */
export function parseJsonObject(body: string | Buffer | undefined | null): JsonObject {
  const text = body === undefined || body === null ? '' : body.toString('utf8');
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch (err) {
    throw invalidJson(err);
  }
  if (value === null) return {};
  if (typeof value !== 'object' || Array.isArray(value)) throw invalidJson();
  return value as JsonObject;
}

/** The value of field `name`, matched as Go does; undefined when absent or null. */
function field(obj: JsonObject, name: string): unknown {
  let found: unknown;
  for (const key of Object.keys(obj)) {
    if (key === name || key.toLowerCase() === name) found = obj[key];
  }
  return found === null ? undefined : found;
}

/** Strings are stored and compared well-formed: lone surrogates become U+FFFD, as Go decodes them. */
function clean(s: string): string {
  return s.isWellFormed() ? s : s.toWellFormed();
}

export function optString(obj: JsonObject, name: string): string | undefined {
  const v = field(obj, name);
  if (v === undefined) return undefined;
  if (typeof v !== 'string') throw invalidJson();
  return clean(v);
}

/** An integer field that must fit its Go type's range [min, max]; anything else is Invalid JSON. */
export function optInteger(obj: JsonObject, name: string, min: number, max: number): number | undefined {
  const v = field(obj, name);
  if (v === undefined) return undefined;
  if (typeof v !== 'number' || !Number.isInteger(v) || v < min || v > max) throw invalidJson();
  return v;
}

export const INT32_MIN = -(2 ** 31);
export const INT32_MAX = 2 ** 31 - 1;
/** Largest uint64 value a JS number can carry; larger ones are out of any valid range anyway. */
export const UINT64_MAX = Number.MAX_VALUE;

/** A map of strings (config). A `null` value inside means "" (delete on update), as in Go. */
export function optStringMap(obj: JsonObject, name: string): Record<string, string> | undefined {
  const v = field(obj, name);
  if (v === undefined) return undefined;
  if (typeof v !== 'object' || Array.isArray(v)) throw invalidJson();
  // fromEntries keeps a "__proto__" key an ordinary entry.
  return Object.fromEntries(
    Object.entries(v as JsonObject).map(([k, value]) => {
      if (value === null) return [clean(k), ''];
      if (typeof value === 'string') return [clean(k), clean(value)];
      throw invalidJson();
    }),
  );
}

/** A map of arbitrary JSON values (annotations). */
export function optValueMap(obj: JsonObject, name: string): Record<string, unknown> | undefined {
  const v = field(obj, name);
  if (v === undefined) return undefined;
  if (typeof v !== 'object' || Array.isArray(v)) throw invalidJson();
  return Object.fromEntries(Object.entries(v as JsonObject).map(([k, value]) => [clean(k), value]));
}

/**
 * Annotations as sent; the endpoint annotations fnts computes on every read
 * are dropped, since clients (the fn CLI among them) echo them back in updates.
 */
export function optAnnotations(obj: JsonObject, name: string): Record<string, unknown> | undefined {
  const value = optValueMap(obj, name);
  if (value === undefined) return undefined;
  return Object.fromEntries(Object.entries(value).filter(([k]) => !COMPUTED_ANNOTATIONS.has(k)));
}

export const COMPUTED_ANNOTATIONS: ReadonlySet<string> = new Set(['fnproject.io/fn/invokeEndpoint', 'fnproject.io/trigger/httpEndpoint']);

/** Go's zero time.Time, 0001-01-01T00:00:00Z (Date.UTC maps year 1 to 1901, so parse it). */
const ZERO_TIME = Date.parse('0001-01-01T00:00:00Z');

/**
 * True when a timestamp field holds a real time. Clients built on Fn's Go
 * models send the zero time ("0001-01-01T00:00:00.000Z") or null for "unset".
 */
export function isSetTimestamp(obj: JsonObject, name: string): boolean {
  const value = optString(obj, name);
  if (value === undefined || value === '') return false;
  const t = Date.parse(value);
  if (Number.isNaN(t)) throw invalidJson();
  return t !== ZERO_TIME;
}
