/**
 * models/ — the records fnts manages (App, Fn, Trigger), the Call that runs
 * anywhere and its outcome, the change feed and the rule every listener is
 * told by (tellEach), the loopback rule (isLoopbackHost), secrets (names and times; values only as bytes), their validation and update rules, and the error
 * catalog with Fn's exact messages.
 */
export { annotationsEqual, INVOKE_AUTH_ANNOTATION, invokeAuthAsked, mergeAnnotations, validateAnnotations } from './annotations.js';
export type { Annotations } from './annotations.js';
export { APP_SHAPES, appPatchFromJson, applyAppPatch, appToJson, DEFAULT_RUNNER_GROUP, newAppFromJson, RUNNER_GROUP_ANNOTATION, RUNNER_GROUP_NAME, runnerGroupOf, validateAppName } from './app.js';
export type { App, AppPatch, AppShape } from './app.js';
export { isoTime, newId, now } from './common.js';
export type { ConfigMap } from './common.js';
export { optString, parseJsonObject } from './decode.js';
export type { JsonObject } from './decode.js';
export { ApiError, apiError, E, errorCode, FunctionError, invalidSyslog, MAX_NAME_LENGTH, MAX_SECRET_VALUE_BYTES, MAX_SECRETS, MAX_SECRETS_BYTES, remoteError, routeError } from './errors.js';
export type { ErrorDef, ErrorName } from './errors.js';
export {
  applyFnPatch,
  ASYNC_MAX_ATTEMPTS_ANNOTATION,
  DEFAULT_FORMAT,
  DEFAULT_IDLE_TIMEOUT_S,
  DEFAULT_MEMORY_MB,
  DEFAULT_TIMEOUT_S,
  FN_FORMATS,
  FN_INVOKE_ENDPOINT_ANNOTATION,
  fnPatchFromJson,
  fnToJson,
  newFnFromJson,
} from './fn.js';
export type { Fn, FnFormat, FnPatch } from './fn.js';
export { applyTriggerPatch, newTriggerFromJson, TRIGGER_HTTP_ENDPOINT_ANNOTATION, TRIGGER_TYPES, triggerPatchFromJson, triggerToJson } from './trigger.js';
export type { Trigger, TriggerPatch, TriggerType } from './trigger.js';
export { CALL_TYPES, callFn, FnInterner, RECORD_BATCH_BYTES, callFromJson, callRecord, callStatus, callToJson, queuedRecord } from './call.js';
export type { Call, CallFn, CallOutcome, CallRecord, CallStat, CallStatus, CallTimings, CallType, FnCallJson, RawHeaders } from './call.js';
export { Changes } from './changes.js';
export { secretToJson, secretValueFromJson, validateSecretName } from './secret.js';
export type { SecretInfo, SecretOwner } from './secret.js';
export { isLoopbackHost } from './net.js';
export { tellEach } from './listeners.js';
export type { ListenerFaultLog } from './listeners.js';
export type { ChangeFeed, ChangeListener, ResourceChange } from './changes.js';
export { isResourceChange } from './changes.js';
export { INSTANCE_LABEL, OWNER_LABEL, TAG_LABEL } from './labels.js';
