/**
 * Trigger: binds a fn to an event source. The one type is `http`: the fn
 * answers `ANY /t/{appName}{source}`.
 */
import { annotationsEqual, mergeAnnotations, validateAnnotations, type Annotations } from './annotations.js';
import { byteLength, mergeMap, newId, now, WORD_NAME } from './common.js';
import { isSetTimestamp, optAnnotations, optString, type JsonObject } from './decode.js';
import { ApiError, E, MAX_NAME_LENGTH } from './errors.js';

export const TRIGGER_TYPES = ['http'] as const;
export type TriggerType = (typeof TRIGGER_TYPES)[number];

/** The annotation carrying the URL an http trigger answers on. */
export const TRIGGER_HTTP_ENDPOINT_ANNOTATION = 'fnproject.io/trigger/httpEndpoint';

export interface Trigger {
  readonly id: string;
  readonly name: string;
  readonly app_id: string;
  readonly fn_id: string;
  readonly type: TriggerType;
  /** URL path below /t/{appName}, always starting with '/'. */
  readonly source: string;
  readonly annotations: Annotations;
  readonly created_at: string;
  readonly updated_at: string;
}

export interface TriggerPatch {
  readonly id?: string | undefined;
  readonly name?: string | undefined;
  readonly app_id?: string | undefined;
  readonly fn_id?: string | undefined;
  readonly type?: string | undefined;
  readonly source?: string | undefined;
  readonly annotations?: Annotations | undefined;
}

function validateTriggerName(name: string): void {
  if (name === '') throw new ApiError(E.TriggerMissingName);
  if (byteLength(name) > MAX_NAME_LENGTH) throw new ApiError(E.TriggerTooLongName);
  if (!WORD_NAME.test(name)) throw new ApiError(E.TriggerInvalidName);
}

/**
 * A source must be a plain URL path the trigger route can match: no query or
 * fragment, no control characters or backslashes, no empty, "." or ".."
 * segments (a client would normalise those away and never reach the trigger).
 * `source` is the decoded form (see `sourceFromJson`).
 */
function validateSource(source: string): void {
  if (source === '') throw new ApiError(E.TriggerMissingSource);
  if (!source.startsWith('/')) throw new ApiError(E.TriggerMissingSourcePrefix);
  if (source === '/') return;
  // eslint-disable-next-line no-control-regex
  if (/[\s?#\\\u0000-\u001f\u007f]/.test(source)) throw new ApiError(E.TriggerInvalidSource);
  const segments = source.slice(1).replace(/\/$/, '').split('/');
  if (segments.some((s) => s === '' || s === '.' || s === '..')) throw new ApiError(E.TriggerInvalidSource);
}

/**
 * The source as stored and matched: the invoke path decodes the request
 * path's escapes before it looks a source up, so a source is kept decoded
 * (`/caf%C3%A9` becomes `/café`, one route however it is spelled) and
 * validated decoded (`/%2e%2e/x` is `/../x`). A '%' left after decoding
 * would change meaning each time the source is sent back, so it is refused.
 */
function sourceFromJson(raw: string | undefined): string | undefined {
  if (raw === undefined || !raw.includes('%')) return raw;
  // The prefix is the user's to write, not an escape's.
  if (!raw.startsWith('/')) throw new ApiError(E.TriggerMissingSourcePrefix);
  let decoded: string;
  try {
    decoded = decodeURIComponent(raw);
  } catch {
    throw new ApiError(E.TriggerInvalidSource);
  }
  if (decoded.includes('%')) throw new ApiError(E.TriggerInvalidSource);
  return decoded;
}

function validateTrigger(t: Trigger): void {
  if (t.app_id === '') throw new ApiError(E.TriggerMissingAppID);
  validateTriggerName(t.name);
  if (t.fn_id === '') throw new ApiError(E.TriggerMissingFnID);
  if (!(TRIGGER_TYPES as readonly string[]).includes(t.type)) throw new ApiError(E.TriggerTypeUnknown);
  validateSource(t.source);
  validateAnnotations(t.annotations);
}

function triggerFieldsFromJson(body: JsonObject): TriggerPatch {
  return {
    id: optString(body, 'id'),
    name: optString(body, 'name'),
    app_id: optString(body, 'app_id'),
    fn_id: optString(body, 'fn_id'),
    type: optString(body, 'type'),
    source: sourceFromJson(optString(body, 'source')),
    annotations: optAnnotations(body, 'annotations'),
  };
}

export function newTriggerFromJson(body: JsonObject): Trigger {
  const f = triggerFieldsFromJson(body);
  if (f.id) throw new ApiError(E.TriggerIDProvided);
  if (isSetTimestamp(body, 'created_at')) throw new ApiError(E.CreatedAtProvided);
  if (isSetTimestamp(body, 'updated_at')) throw new ApiError(E.UpdatedAtProvided);
  const created = now();
  const trigger: Trigger = {
    id: newId(),
    name: f.name ?? '',
    app_id: f.app_id ?? '',
    fn_id: f.fn_id ?? '',
    type: (f.type ?? '') as TriggerType,
    source: f.source ?? '',
    annotations: f.annotations ?? {},
    created_at: created,
    updated_at: created,
  };
  validateTrigger(trigger);
  return trigger;
}

export function triggerPatchFromJson(body: JsonObject): TriggerPatch {
  return triggerFieldsFromJson(body);
}

/**
 * Applies `patch` to `current`: name, fn and source may change (the datastore
 * checks the new fn and uniqueness), annotations merge; app and type cannot change.
 */
export function applyTriggerPatch(current: Trigger, patch: TriggerPatch): Trigger {
  if (patch.app_id && patch.app_id !== current.app_id) throw new ApiError(E.TriggerAppImmutable);
  if (patch.type && patch.type !== current.type) throw new ApiError(E.TriggerTypeImmutable);
  const next: Trigger = {
    ...current,
    name: patch.name || current.name,
    fn_id: patch.fn_id || current.fn_id,
    source: patch.source || current.source,
    annotations: mergeAnnotations(current.annotations, patch.annotations),
  };
  validateTrigger(next);
  const changed = next.name !== current.name || next.fn_id !== current.fn_id || next.source !== current.source || !annotationsEqual(next.annotations, current.annotations);
  return changed ? { ...next, updated_at: now() } : current;
}

export function triggerToJson(t: Trigger, extraAnnotations: Record<string, unknown> = {}): Record<string, unknown> {
  const annotations = mergeMap(t.annotations, extraAnnotations, () => false);
  const out: Record<string, unknown> = {
    id: t.id,
    name: t.name,
    app_id: t.app_id,
    fn_id: t.fn_id,
    created_at: t.created_at,
    updated_at: t.updated_at,
    type: t.type,
    source: t.source,
  };
  if (Object.keys(annotations).length > 0) out['annotations'] = annotations;
  return out;
}
