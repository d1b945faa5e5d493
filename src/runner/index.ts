/**
 * runner/ — the pure runner: Fn's gRPC RunnerProtocol (rpc/) in front of the
 * local agent.
 */
export { RunnerServer } from './runner.js';
export type { RunnerServerOptions } from './runner.js';
export { RunnerSecrets } from './secrets.js';
