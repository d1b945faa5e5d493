/**
 * App: a named group of functions sharing config, annotations and a syslog URL.
 */
import { annotationsEqual, mergeAnnotations, validateAnnotations, validateInvokeAuth, type Annotations } from './annotations.js';
import { byteLength, configEqual, mergeConfig, newId, now, validateConfig, WORD_NAME, type ConfigMap } from './common.js';
import { optString, optStringMap, optAnnotations, type JsonObject } from './decode.js';
import { ApiError, E, invalidSyslog, MAX_NAME_LENGTH } from './errors.js';

/**
 * The runner group an app's calls run in, in a managed fleet (FN_NPM_ADDRESS):
 * the LB asks the pool manager for that group's runners and advertises the
 * group's needs. A DNS label, since control planes name services after it.
 */
export const RUNNER_GROUP_ANNOTATION = 'fnts.io/runner-group';
/** The group of an app without the annotation. */
export const DEFAULT_RUNNER_GROUP = 'default';
/** At most 40 characters: control planes name containers, services and Deployments after the group, with a prefix. */
export const RUNNER_GROUP_NAME = /^[a-z0-9]([a-z0-9-]{0,38}[a-z0-9])?$/;

/** The runner group of an app with `annotations` (validated ones: a bad value was refused when stored). */
export function runnerGroupOf(annotations: Annotations): string {
  const group = annotations[RUNNER_GROUP_ANNOTATION];
  return typeof group === 'string' && RUNNER_GROUP_NAME.test(group) ? group : DEFAULT_RUNNER_GROUP;
}

export const APP_SHAPES = ['GENERIC_X86', 'GENERIC_ARM', 'GENERIC_X86_ARM'] as const;
export type AppShape = (typeof APP_SHAPES)[number];

export interface App {
  readonly id: string;
  readonly name: string;
  readonly config: ConfigMap;
  readonly annotations: Annotations;
  readonly syslog_url: string | undefined;
  /** The machine shape its functions need; undefined when none was asked for (Fn then shows none). */
  readonly shape: AppShape | undefined;
  readonly created_at: string;
  readonly updated_at: string;
}

/** A partial update of an app: absent fields stay as they are. */
export interface AppPatch {
  readonly id?: string | undefined;
  readonly name?: string | undefined;
  readonly config?: ConfigMap | undefined;
  readonly annotations?: Annotations | undefined;
  /** "" clears the syslog URL. */
  readonly syslog_url?: string | undefined;
}

export function validateAppName(name: string | undefined): asserts name is string {
  if (name === undefined || name === '') throw new ApiError(E.MissingName);
  if (byteLength(name) > MAX_NAME_LENGTH) throw new ApiError(E.AppsTooLongName);
  if (!WORD_NAME.test(name)) throw new ApiError(E.AppsInvalidName);
}

const SYSLOG_SCHEMES = new Set(['udp', 'tcp', 'unix', 'unixgram', 'tcp+tls']);

function validateSyslogUrl(raw: string): void {
  const trimmed = raw.trim();
  let scheme: string;
  try {
    scheme = new URL(trimmed).protocol.replace(/:$/, '').toLowerCase();
  } catch {
    // A URL without a scheme ("host:514", "logs") parses in Go with an empty scheme.
    if (!/^[a-z][a-z0-9+.-]*:/i.test(trimmed)) scheme = '';
    else throw invalidSyslog(raw, `parse "${trimmed}": invalid URL`);
  }
  if (!SYSLOG_SCHEMES.has(scheme)) {
    throw invalidSyslog(raw, 'invalid scheme, only [tcp, udp, unix, unixgram, tcp+tls] are supported');
  }
}

function validateApp(app: App): void {
  validateAppName(app.name);
  validateAnnotations(app.annotations);
  validateInvokeAuth(app.annotations);
  const group = app.annotations[RUNNER_GROUP_ANNOTATION];
  if (group !== undefined && !(typeof group === 'string' && RUNNER_GROUP_NAME.test(group))) throw new ApiError(E.InvalidRunnerGroup);
  if (app.syslog_url !== undefined && app.syslog_url !== '') validateSyslogUrl(app.syslog_url);
  if (app.shape !== undefined && !(APP_SHAPES as readonly string[]).includes(app.shape)) throw new ApiError(E.AppsInvalidShape);
  validateConfig(app.config);
}

/** Builds a new app from a create request body; throws Fn's validation errors. */
export function newAppFromJson(body: JsonObject): App {
  if (optString(body, 'id')) throw new ApiError(E.AppIDProvided);
  const created = now();
  const syslog = optString(body, 'syslog_url');
  const app: App = {
    id: newId(),
    name: optString(body, 'name') ?? '',
    config: optStringMap(body, 'config') ?? {},
    annotations: optAnnotations(body, 'annotations') ?? {},
    syslog_url: syslog === '' ? undefined : syslog,
    // Checked by validateApp below; "" is no shape, as in Fn.
    shape: (optString(body, 'shape') || undefined) as AppShape | undefined,
    created_at: created,
    updated_at: created,
  };
  validateApp(app);
  return app;
}

export function appPatchFromJson(body: JsonObject): AppPatch {
  return {
    id: optString(body, 'id'),
    name: optString(body, 'name'),
    config: optStringMap(body, 'config'),
    annotations: optAnnotations(body, 'annotations'),
    syslog_url: optString(body, 'syslog_url'),
  };
}

/**
 * Applies `patch` to `current`: config and annotations merge (empty values
 * delete), the name cannot change; `updated_at` moves only when something did.
 */
export function applyAppPatch(current: App, patch: AppPatch): App {
  if (patch.name !== undefined && patch.name !== '' && patch.name !== current.name) throw new ApiError(E.AppsNameImmutable);
  let syslog = current.syslog_url;
  if (patch.syslog_url !== undefined) syslog = patch.syslog_url === '' ? undefined : patch.syslog_url;
  const next: App = {
    ...current,
    config: mergeConfig(current.config, patch.config),
    annotations: mergeAnnotations(current.annotations, patch.annotations),
    syslog_url: syslog,
  };
  validateApp(next);
  const changed = !configEqual(next.config, current.config) || !annotationsEqual(next.annotations, current.annotations) || next.syslog_url !== current.syslog_url;
  return changed ? { ...next, updated_at: now() } : current;
}

/** The app as Fn's API shows it: empty config, annotations and syslog_url, and an unset shape, are left out. */
export function appToJson(app: App): Record<string, unknown> {
  const out: Record<string, unknown> = { id: app.id, name: app.name };
  if (Object.keys(app.config).length > 0) out['config'] = app.config;
  if (Object.keys(app.annotations).length > 0) out['annotations'] = app.annotations;
  if (app.syslog_url !== undefined) out['syslog_url'] = app.syslog_url;
  if (app.shape !== undefined) out['shape'] = app.shape;
  out['created_at'] = app.created_at;
  out['updated_at'] = app.updated_at;
  return out;
}
