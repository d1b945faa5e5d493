/**
 * runner/ — the pure runner: Fn's gRPC RunnerProtocol in front of the local
 * agent, and the protocol's messages and translations both sides share.
 */
export { RunnerServer } from './runner.js';
export { bindServer, shutdownServer } from './grpc.js';
export type { RunnerServerOptions } from './runner.js';
export type { ServerTls } from './h2-server.js';
export { DRAINING_HEADER, finishedMessage, LOG_EXTENSION, LOG_TRAILER, MAKE_ROOM_EXTENSION, MAX_FRAME_BYTES, nsToMs, refusalMessage, roomFromRefusal, RUNNER_PROTO_PATH, wireCallJson } from './protocol.js';
export type {
  CallFinishedMsg,
  ClientMsg,
  DataFrameMsg,
  RunnerMsg,
  RunnerStatusMsg,
  TryCallMsg,
} from './protocol.js';
