import { describe, expect, it } from 'vitest';
import { E } from './errors.js';

// Fn's words for each error, as its API answers them (api/models in fnproject/fn).
// A change here is a compatibility break for clients that match on messages.
const FN_MESSAGES: Record<string, [number, string]> = {
  InvalidJSON: [400, 'Invalid JSON'],
  MethodNotAllowed: [405, 'Method not allowed'],
  PathNotFound: [404, 'Path not found'],
  PathMalformed: [400, 'Path malformed'],
  RequestContentTooBig: [413, 'Request content too large'],
  MissingID: [400, 'Missing ID'],
  MissingName: [400, 'Missing Name'],
  InternalServerError: [500, 'internal server error'],
  AppIDProvided: [400, 'App ID cannot be supplied on create'],
  AppsIDMismatch: [400, 'App ID in path does not match ID in body'],
  AppsMissingID: [400, 'Missing app ID'],
  AppsTooLongName: [400, 'App name must be 255 characters or less'],
  AppsInvalidName: [400, 'Invalid app name'],
  AppsInvalidShape: [400, 'Invalid app shape'],
  AppsAlreadyExists: [409, 'App already exists'],
  AppsNameImmutable: [409, 'Could not update - name is immutable'],
  AppsNotFound: [404, 'App not found'],
  FnsIDProvided: [400, 'ID cannot be provided for Fn creation'],
  FnsIDMismatch: [400, 'Fn ID in path does not match that in body'],
  FnsMissingName: [400, 'Missing Fn name'],
  FnsTooLongName: [400, 'Fn name must be 255 characters or less'],
  FnsInvalidName: [400, 'name must be a valid string'],
  FnsMissingAppID: [400, 'Missing AppID on Fn'],
  FnsMissingImage: [400, 'Missing image on Fn'],
  FnsInvalidFormat: [400, 'Invalid format on Fn'],
  FnsInvalidTimeout: [400, 'timeout value is out of range, must be between 0 and 300'],
  FnsInvalidIdleTimeout: [400, 'idle_timeout value is out of range, must be between 0 and 3600'],
  InvalidMemory: [400, 'memory value is out of range. It should be between 0 and 8192'],
  FnsNotFound: [404, 'Fn not found'],
  FnsExists: [409, 'Fn with specified name already exists'],
  TriggerIDProvided: [400, 'ID cannot be provided for Trigger creation'],
  TriggerIDMismatch: [400, 'ID in path does not match ID in body'],
  CreatedAtProvided: [400, 'Trigger Created At Provided for Create'],
  UpdatedAtProvided: [400, 'Trigger ID Provided for Create'],
  TriggerMissingName: [400, 'Missing name on Trigger'],
  TriggerTooLongName: [400, 'Trigger name must be 255 characters or less'],
  TriggerInvalidName: [400, 'Invalid name for Trigger'],
  TriggerMissingAppID: [400, 'Missing App ID on Trigger'],
  TriggerMissingFnID: [400, 'Missing Fn ID on Trigger'],
  TriggerFnIDNotSameApp: [400, 'Invalid Fn ID - not owned by specified app'],
  TriggerTypeUnknown: [400, 'Trigger Type Not Supported'],
  TriggerMissingSource: [400, 'Missing Trigger Source'],
  TriggerMissingSourcePrefix: [400, "Missing Trigger Source Prefix '/'"],
  TriggerNotFound: [404, 'Trigger not found'],
  TriggerExists: [409, 'Trigger already exists'],
  TriggerSourceExists: [409, 'Trigger with the same type and source exists on this app'],
  InvalidAnnotationKey: [400, 'Invalid annotation key, annotation keys must be non-empty ascii strings excluding whitespace'],
  InvalidAnnotationKeyLength: [400, 'Invalid annotation key length, annotation keys may not be larger than 128 bytes'],
  InvalidAnnotationValue: [400, 'Invalid annotation value, annotation values may only be non-empty strings, numbers, objects, or arrays'],
  InvalidAnnotationValueLength: [400, 'Invalid annotation value length, annotation values may not be larger than 512 bytes when serialized as JSON'],
  TooManyAnnotationKeys: [400, 'Invalid annotation change, new key(s) exceed maximum permitted number of annotations keys (100)'],
};

describe('error catalog', () => {
  it.each(Object.entries(FN_MESSAGES))("%s answers with Fn's status and message", (name, [status, message]) => {
    const entry = (E as Record<string, { status: number; message: string; code: string }>)[name];
    expect(entry).toBeDefined();
    expect({ status: entry!.status, message: entry!.message, code: entry!.code }).toEqual({ status, message, code: name });
  });

  it('gives every entry a unique code, a 4xx/5xx status and a message', () => {
    const entries = Object.entries(E);
    expect(new Set(entries.map(([, d]) => d.code)).size).toBe(entries.length);
    for (const [name, d] of entries) {
      expect(d.code).toBe(name);
      expect(d.status).toBeGreaterThanOrEqual(400);
      expect(d.status).toBeLessThan(600);
      expect(d.message.length).toBeGreaterThan(0);
    }
  });
});
