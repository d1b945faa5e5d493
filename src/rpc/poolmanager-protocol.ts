/**
 * Fn's 2018 pool manager protocol (proto/fn-poolmanager.proto), as both sides
 * speak it: LBs tell the manager, per runner group, how much memory their
 * waiting and running calls need (`NodePoolScaler.AdvertiseCapacity`), and
 * ask it which runners make up a group (`RunnerManager.GetLBGroup`).
 *
 * The messages as TypeScript types, the two services loaded once, and a small
 * promise-based client an LB uses (poolManagerClient).
 */
import { fileURLToPath } from 'node:url';
import * as grpc from '@grpc/grpc-js';
import { loadSync } from '@grpc/proto-loader';

export interface LBGroupIdMsg {
  id: string;
}

export interface PoolRunnerMsg {
  /** host:port of the runner's RunnerProtocol (FN_GRPC_PORT). */
  address: string;
  /** Unused by fnts (Fn meant a per-runner TLS key); always empty. */
  client_key: Buffer;
}

export interface LBGroupMembershipMsg {
  group_id: LBGroupIdMsg | null;
  runners: PoolRunnerMsg[];
}

export interface CapacitySnapshotMsg {
  group_id: LBGroupIdMsg | null;
  /** The memory (MB) the LB's waiting and running calls of this group need. */
  mem_mb_total: number;
}

export interface TimestampMsg {
  seconds: number;
  nanos: number;
}

export interface CapacitySnapshotListMsg {
  ts: TimestampMsg | null;
  lb_id: string;
  snapshots: CapacitySnapshotMsg[];
}

type Unary<Req, Res> = (request: Req, metadata: grpc.Metadata, options: grpc.CallOptions, callback: grpc.requestCallback<Res>) => grpc.ClientUnaryCall;

export interface NodePoolScalerClient extends grpc.Client {
  AdvertiseCapacity: Unary<CapacitySnapshotListMsg, Record<string, never>>;
}

export interface RunnerManagerClient extends grpc.Client {
  GetLBGroup: Unary<LBGroupIdMsg, LBGroupMembershipMsg>;
}

type Constructor<C> = (new (address: string, credentials: grpc.ChannelCredentials, options?: grpc.ChannelOptions) => C) & { service: grpc.ServiceDefinition };

export interface PoolManagerProtocol {
  readonly NodePoolScaler: Constructor<NodePoolScalerClient>;
  readonly RunnerManager: Constructor<RunnerManagerClient>;
}

/** The proto ships with fnts (proto/ beside src/ and dist/). */
const PROTO_PATH = fileURLToPath(new URL('../../proto/fn-poolmanager.proto', import.meta.url));

let loaded: PoolManagerProtocol | undefined;

/** Both services' definitions (`.service`) and client classes, loaded once. */
export function poolManagerProtocol(): PoolManagerProtocol {
  if (!loaded) {
    const definition = loadSync(PROTO_PATH, { keepCase: true, longs: Number, enums: String, defaults: true, oneofs: true });
    loaded = grpc.loadPackageDefinition(definition) as unknown as PoolManagerProtocol;
  }
  return loaded;
}

/** What an LB says in one AdvertiseCapacity: for each runner group, the memory (MB) its calls need. */
export type CapacityNeeds = Readonly<Record<string, number>>;

/** The pool manager as an LB sees it. Every method rejects with the gRPC error when the manager cannot be reached in time. */
export interface PoolManagerClient {
  /** Tells the manager what this LB (`lbId`, stable for the LB's life) needs now, per group; groups left out need nothing. */
  advertiseCapacity(lbId: string, needs: CapacityNeeds, timeoutMs?: number): Promise<void>;
  /** The group's active runners (host:port), oldest first: the order stays put as runners come and go. */
  getLBGroup(group: string, timeoutMs?: number): Promise<string[]>;
  /** Closes the channel. Idempotent. */
  close(): void;
}

export interface PoolManagerClientOptions {
  /** How long one request may take (default 5 s). */
  readonly timeoutMs?: number;
}

/**
 * A client of the pool manager at `address` (host:port, FN_NPM_ADDRESS):
 * one channel for both services.
 */
export function poolManagerClient(address: string, credentials: grpc.ChannelCredentials = grpc.credentials.createInsecure(), options: PoolManagerClientOptions = {}): PoolManagerClient {
  const { NodePoolScaler, RunnerManager } = poolManagerProtocol();
  const scaler = new NodePoolScaler(address, credentials, { 'grpc.initial_reconnect_backoff_ms': 100, 'grpc.max_reconnect_backoff_ms': 2_000 });
  // The second client shares the first one's channel.
  const manager = new RunnerManager(address, credentials, { channelOverride: scaler.getChannel() });
  const timeoutMs = options.timeoutMs ?? 5_000;
  const unary = <Req, Res>(client: grpc.Client, method: Unary<Req, Res>, request: Req, ms = timeoutMs): Promise<Res> =>
    new Promise<Res>((resolve, reject) => {
      method.call(client, request, new grpc.Metadata(), { deadline: Date.now() + ms }, (err, res) => (err || res === undefined ? reject(err ?? new Error('no answer')) : resolve(res)));
    });
  return {
    async advertiseCapacity(lbId, needs, ms) {
      const now = Date.now();
      const snapshots = Object.entries(needs).map(([id, mem]) => ({ group_id: { id }, mem_mb_total: Math.max(0, Math.ceil(mem)) }));
      await unary(scaler, scaler.AdvertiseCapacity, { ts: { seconds: Math.floor(now / 1000), nanos: (now % 1000) * 1_000_000 }, lb_id: lbId, snapshots }, ms);
    },
    async getLBGroup(group, ms) {
      const membership = await unary(manager, manager.GetLBGroup, { id: group }, ms);
      return membership.runners.map((r) => r.address);
    },
    close() {
      // One channel under both clients.
      scaler.close();
    },
  };
}
