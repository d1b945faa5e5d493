/**
 * server/ — HTTP: the REST API, error mapping, /version, and the wiring that
 * starts a server process for its role.
 */
export { registerApi } from './api.js';
export type { ApiDeps } from './api.js';
export { FnLookup } from './lookup.js';
export type { Target, TargetLookup } from './lookup.js';
export { toHttpError } from './errors.js';
export type { HttpError } from './errors.js';
export { createLogger, startServer } from './main.js';
export type { RunningServer } from './main.js';
export { buildServer, VERSION } from './server.js';
export type { ServerDeps } from './server.js';
