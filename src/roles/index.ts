/**
 * roles/ — one composition root per role (FN_NODE_TYPE: full, api, lb,
 * pure-runner, poolmanager), each building only what it uses, and the start
 * of a server process in its role.
 */
export { createLogger } from './common.js';
export { startServer } from './start.js';
export type { RunningServer } from './start.js';
