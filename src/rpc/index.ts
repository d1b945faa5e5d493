/**
 * rpc/ — the fleet's wire: gRPC's framing on node:http2 (server, channel,
 * codec), Fn's runner protocol (messages, translations, the LB's client of
 * it) and the 2018 pool manager protocol. lb/, runner/ and poolmanager/
 * speak to each other only through here.
 */
export { H2Channel } from './channel.js';
export type { ChannelOptions, ChannelTls } from './channel.js';
export { bindServer, shutdownServer } from './grpc-js.js';
export { poolManagerClient, poolManagerProtocol } from './poolmanager-protocol.js';
export type {
  CapacityNeeds,
  CapacitySnapshotListMsg,
  CapacitySnapshotMsg,
  LBGroupIdMsg,
  LBGroupMembershipMsg,
  NodePoolScalerClient,
  PoolManagerClient,
  PoolManagerClientOptions,
  PoolManagerProtocol,
  PoolRunnerMsg,
  RunnerManagerClient,
  TimestampMsg,
} from './poolmanager-protocol.js';
export { engageRequest, RunnerClient } from './runner-client.js';
export type { Attempt, EngageOptions, EngageRequest, RunnerClientOptions } from './runner-client.js';
export {
  DRAINING_HEADER,
  finishedMessage,
  LOG_EXTENSION,
  LOG_TRAILER,
  MAKE_ROOM_EXTENSION,
  MAX_FRAME_BYTES,
  nsToMs,
  refusalMessage,
  roomFromRefusal,
  RUNNER_PROTO_PATH,
  runnerStatusMessage,
  wireCallJson,
} from './runner-protocol.js';
export type { CallFinishedMsg, CallResultStartMsg, ClientMsg, DataFrameMsg, HttpHeaderMsg, RunnerMsg, RunnerStatusMsg, TryCallMsg } from './runner-protocol.js';
export { GrpcH2Server, GrpcServerCall, unary } from './server.js';
export type { GrpcHandler, GrpcServerOptions, ServerTls } from './server.js';
export {
  CONFIGURE_PATH,
  decodeClientMsg,
  decodeRunnerMsg,
  decodeRunnerStatus,
  encodeClientMsg,
  encodeEmpty,
  encodeGrpcMessage,
  encodeRunnerMsg,
  encodeRunnerStatus,
  ENGAGE_PATH,
  FNTS_CLIENT_SETTING,
  GrpcStatus,
  grpcMessage,
  grpcTimeout,
  loadWire,
  MAX_MESSAGE_BYTES,
  MessageReader,
  parseGrpcTimeout,
  STATUS2_PATH,
  STATUS_PATH,
} from './wire.js';
