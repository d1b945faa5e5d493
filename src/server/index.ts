/**
 * server/ — HTTP: the REST API, the invoke endpoints (over an Invoker), error
 * mapping, probes, the fn/trigger lookup cache, call records, detached-call
 * intake and reconciliation, syslog forwarding, the secrets API. The roles (roles/) wire them.
 */
export { registerApi } from './api.js';
export { ChangeLog, registerChangesApi } from './changes.js';
export { registerSecretsApi } from './secrets.js';
export type { SecretsApiDeps } from './secrets.js';
export type { ApiDeps } from './api.js';
export { FnLookup } from './lookup.js';
export type { Target, TargetLookup } from './lookup.js';
export { toHttpError } from './errors.js';
export type { HttpError } from './errors.js';
export { buildServer, VERSION } from './server.js';
export { routesOf } from './routing.js';
export type { ApiServing, ServerDeps } from './server.js';
export { InvokeHandler } from './invoke.js';
export { CallRecorder } from './records.js';
export type { CallRecorderOptions } from './records.js';
export { QueueIntake, QueueReconciler } from './detached.js';
export { SyslogForwarder } from './syslog.js';
export { datastoreCheck, engineCheck, networkCheck, queueCheck } from './probes.js';
