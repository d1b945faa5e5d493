/**
 * Annotations: free-form metadata on apps, fns and triggers; never passed to
 * the function. Keys are printable ASCII without spaces (at most 128 bytes);
 * values are any non-empty JSON value whose compact form is at most 512 bytes;
 * at most 100 keys. In an update, a key set to "" or null is removed.
 */
import { ApiError, E, MAX_ANNOTATION_KEY_BYTES, MAX_ANNOTATION_KEYS, MAX_ANNOTATION_VALUE_BYTES } from './errors.js';
import { mergeMap } from './common.js';

export type Annotations = Readonly<Record<string, unknown>>;

/** `fnts.io/invoke-auth: "token"` on an app or fn: its calls need a token with the invoke right (auth/invoke.ts). */
export const INVOKE_AUTH_ANNOTATION = 'fnts.io/invoke-auth';

/** Throws unless the invoke-auth annotation is absent or "token": a misspelt value must not leave a fn open by surprise. */
export function validateInvokeAuth(annotations: Annotations): void {
  const v = annotations[INVOKE_AUTH_ANNOTATION];
  if (v !== undefined && v !== 'token') throw new ApiError(E.InvalidInvokeAuth);
}

/** Whether these annotations ask for a token on invoke. */
export function invokeAuthAsked(annotations: Annotations): boolean {
  return annotations[INVOKE_AUTH_ANNOTATION] === 'token';
}

const VALID_KEY = /^[!-~]+$/;

function isEmptyValue(value: unknown): boolean {
  return value === '' || value === null || value === undefined;
}

function validateEntry(key: string, value: unknown): void {
  if (!VALID_KEY.test(key)) throw new ApiError(E.InvalidAnnotationKey);
  if (Buffer.byteLength(key) > MAX_ANNOTATION_KEY_BYTES) throw new ApiError(E.InvalidAnnotationKeyLength);
  if (isEmptyValue(value)) throw new ApiError(E.InvalidAnnotationValue);
  if (Buffer.byteLength(JSON.stringify(value)) > MAX_ANNOTATION_VALUE_BYTES) throw new ApiError(E.InvalidAnnotationValueLength);
}

/** Validates a complete annotation set, as stored. */
export function validateAnnotations(annotations: Annotations): void {
  const keys = Object.keys(annotations);
  for (const key of keys) validateEntry(key, annotations[key]);
  if (keys.length > MAX_ANNOTATION_KEYS) throw new ApiError(E.TooManyAnnotationKeys);
}

/** Applies an update: empty values delete their key, others replace. */
export function mergeAnnotations(current: Annotations, change: Annotations | undefined): Annotations {
  return mergeMap(current, change, isEmptyValue);
}

/** Order-insensitive equality of keys, order-sensitive equality of each value's JSON. */
export function annotationsEqual(a: Annotations, b: Annotations): boolean {
  const ka = Object.keys(a);
  if (ka.length !== Object.keys(b).length) return false;
  return ka.every((k) => k in b && JSON.stringify(a[k]) === JSON.stringify(b[k]));
}
