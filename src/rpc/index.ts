/**
 * rpc/ — the fleet's wire: gRPC's framing on node:http2 (server, channel,
 * codec), Fn's runner protocol (messages, translations, the LB's client of
 * it) and the 2018 pool manager protocol, their messages generated from
 * proto/ (gen/, by scripts/proto-gen.mjs). lb/, runner/ and poolmanager/
 * speak to each other only through here.
 */
export { grpcEnd, grpcHeaders, H2Channel } from './channel.js';
export type { ChannelOptions, ChannelTls, GrpcEnd } from './channel.js';
export { ADVERTISE_CAPACITY_PATH, GET_LB_GROUP_PATH, MAX_POOL_MESSAGE_BYTES, poolManagerClient, poolManagerMethods } from './poolmanager-protocol.js';
export type {
  CapacityNeeds,
  CapacitySnapshotListMsg,
  CapacitySnapshotMsg,
  LBGroupIdMsg,
  LBGroupMembershipMsg,
  PoolManagerClient,
  PoolManagerClientOptions,
  PoolManagerService,
  PoolRunnerMsg,
  TimestampMsg,
} from './poolmanager-protocol.js';
export { engageRequest, loopbackAddress, RunnerClient } from './runner-client.js';
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
  runnerStatusMessage,
  SECRETS_FIELD,
  takeSecrets,
  wireCallJson,
} from './runner-protocol.js';
export type { CallFinishedMsg, CallResultStartMsg, ClientMsg, DataFrameMsg, HttpHeaderMsg, RunnerMsg, RunnerStatusMsg, TryCallMsg } from './runner-protocol.js';
export { GrpcH2Server, GrpcServerCall, unary } from './server.js';
export type { GrpcHandler, GrpcServerOptions, ServerTls } from './server.js';
export {
  asBuffer,
  CONFIGURE_PATH,
  decodeClientMsg,
  decodeRunnerMsg,
  decodeRunnerStatus,
  encodeClientMsg,
  encodeEmpty,
  encodeGrpcMessage,
  encodeMessage,
  encodeRunnerMsg,
  encodeRunnerStatus,
  ENGAGE_PATH,
  FNTS_CLIENT_SETTING,
  GrpcError,
  GrpcStatus,
  grpcMessage,
  grpcTimeout,
  MAX_MESSAGE_BYTES,
  MessageReader,
  parseGrpcTimeout,
  STATUS2_PATH,
  STATUS_PATH,
  statusOfHttp,
} from './wire.js';
export type { MessageCodec } from './wire.js';
