/**
 * Fn's 2018 pool manager protocol (proto/fn-poolmanager.proto), as both sides
 * speak it: LBs tell the manager, per runner group, how much memory their
 * waiting and running calls need (`NodePoolScaler.AdvertiseCapacity`), and
 * ask it which runners make up a group (`RunnerManager.GetLBGroup`).
 *
 * Unary calls on the fleet's one gRPC implementation: the manager serves
 * them on a GrpcH2Server (poolManagerMethods), an LB calls them on an
 * H2Channel (poolManagerClient); the messages are the classes protobufjs
 * generates from the proto (src/rpc/gen/fn-poolmanager.js).
 */
import { H2Channel, type ChannelTls } from './channel.js';
import { CapacitySnapshotList, google, LBGroupId, LBGroupMembership } from './gen/fn-poolmanager.js';
import { unary, type GrpcHandler } from './server.js';
import { encodeEmpty, encodeMessage, GrpcError, GrpcStatus, type MessageCodec } from './wire.js';

export type {
  CapacitySnapshot as CapacitySnapshotMsg,
  CapacitySnapshotList as CapacitySnapshotListMsg,
  LBGroupId as LBGroupIdMsg,
  LBGroupMembership as LBGroupMembershipMsg,
  Runner as PoolRunnerMsg,
} from './gen/fn-poolmanager.js';
export type TimestampMsg = google.protobuf.Timestamp;

/** Paths of the two services' methods (the proto has no package). */
export const ADVERTISE_CAPACITY_PATH = '/NodePoolScaler/AdvertiseCapacity';
export const GET_LB_GROUP_PATH = '/RunnerManager/GetLBGroup';

/** The largest request the manager takes: an advertisement names each group once (gRPC's default limit). */
export const MAX_POOL_MESSAGE_BYTES = 4 * 1024 * 1024;

/**
 * What the manager does with each call. Either may throw a GrpcError
 * (INVALID_ARGUMENT for a bad group name): the caller gets its status.
 */
export interface PoolManagerService {
  advertiseCapacity(request: CapacitySnapshotList): void;
  getLBGroup(request: LBGroupId): LBGroupMembership;
}

/** The request's one message, decoded; a missing or malformed one fails the call (INTERNAL, as gRPC's servers answer it). */
function decodeRequest<T>(codec: MessageCodec<T>, name: string, bytes: Buffer | undefined): T {
  if (bytes === undefined) throw new GrpcError(GrpcStatus.INTERNAL, `the request has no ${name} message`);
  try {
    return codec.decode(bytes);
  } catch (err) {
    throw new GrpcError(GrpcStatus.INTERNAL, `the request is not a ${name}: ${err instanceof Error ? err.message : String(err)}`);
  }
}

/** Both services' methods, for a GrpcH2Server. */
export function poolManagerMethods(service: PoolManagerService): Map<string, GrpcHandler> {
  return new Map([
    [
      ADVERTISE_CAPACITY_PATH,
      unary((bytes) => {
        service.advertiseCapacity(decodeRequest(CapacitySnapshotList, 'CapacitySnapshotList', bytes));
        return encodeEmpty();
      }),
    ],
    [GET_LB_GROUP_PATH, unary((bytes) => encodeMessage(LBGroupMembership, service.getLBGroup(decodeRequest(LBGroupId, 'LBGroupId', bytes))))],
  ]);
}

/** What an LB says in one AdvertiseCapacity: for each runner group, the memory (MB) its calls need. */
export type CapacityNeeds = Readonly<Record<string, number>>;

/** The pool manager as an LB sees it. Every method rejects with a GrpcError when the manager refuses or cannot be reached in time. */
export interface PoolManagerClient {
  /** Tells the manager what this LB (`lbId`, stable for the LB's life) needs now, per group; groups left out need nothing. */
  advertiseCapacity(lbId: string, needs: CapacityNeeds, timeoutMs?: number): Promise<void>;
  /** The group's active runners (host:port), oldest first: the order stays put as runners come and go. */
  getLBGroup(group: string, timeoutMs?: number): Promise<string[]>;
  /** Closes the channel. Idempotent. */
  close(): void;
}

export interface PoolManagerClientOptions {
  /** Mutual TLS to the manager (FNTS_GRPC_TLS_*); plaintext when absent. */
  readonly tls?: ChannelTls | undefined;
  /** How long one request may take (default 5 s). */
  readonly timeoutMs?: number;
}

/**
 * A client of the pool manager at `address` (host:port, FN_NPM_ADDRESS):
 * one connection for both services, dialed at the first call.
 */
export function poolManagerClient(address: string, options: PoolManagerClientOptions = {}): PoolManagerClient {
  const channel = new H2Channel(address, { tls: options.tls });
  const timeoutMs = options.timeoutMs ?? 5_000;
  return {
    async advertiseCapacity(lbId, needs, ms = timeoutMs) {
      const now = Date.now();
      const snapshots = Object.entries(needs).map(([id, mem]) => ({ group_id: { id }, mem_mb_total: Math.max(0, Math.ceil(mem)) }));
      const request: CapacitySnapshotList = { ts: { seconds: Math.floor(now / 1000), nanos: (now % 1000) * 1_000_000 }, lb_id: lbId, snapshots };
      await channel.unary(ADVERTISE_CAPACITY_PATH, encodeMessage(CapacitySnapshotList, request), ms);
    },
    async getLBGroup(group, ms = timeoutMs) {
      const membership = LBGroupMembership.decode(await channel.unary(GET_LB_GROUP_PATH, encodeMessage(LBGroupId, { id: group }), ms));
      return membership.runners.map((r) => r.address);
    },
    close() {
      channel.close();
    },
  };
}
