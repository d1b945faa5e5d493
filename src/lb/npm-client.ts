/**
 * The LB's side of Fn's 2018 pool manager protocol
 * (../shared/spec/fn-poolmanager-2018.proto): it tells the manager what each
 * runner group needs (NodePoolScaler.AdvertiseCapacity) and asks it which
 * runners a group has (RunnerManager.GetLBGroup).
 *
 * The proto has no package: the services are `/NodePoolScaler/...` and
 * `/RunnerManager/...` on the wire, as Fn's manager served them. Both
 * services are on the one address (FN_NPM_ADDRESS), over one channel.
 *
 * The protocol is loaded from a descriptor written here, the proto's
 * messages field for field, so that the LB needs no file beside it; the
 * pool manager's own module will own the loaded protocol once it lands.
 */
import * as grpc from '@grpc/grpc-js';
import { fromJSON } from '@grpc/proto-loader';

/** One group's need: the memory (MB) its calls waiting and running through this LB want. */
export interface CapacitySnapshot {
  readonly group: string;
  readonly memMbTotal: number;
}

/** What one AdvertiseCapacity carries: this LB's id, when it was measured, and each group's need. */
export interface CapacityAdvertisement {
  readonly lbId: string;
  /** Milliseconds since the epoch. */
  readonly at: number;
  readonly snapshots: readonly CapacitySnapshot[];
}

/** The seam the pool and the advertiser use; `PoolManagerClient` is the real one. */
export interface PoolManagerApi {
  /** The group's active runners' addresses, in the manager's order. Rejects with the gRPC error. */
  getLBGroup(group: string, timeoutMs: number): Promise<string[]>;
  /** Rejects with the gRPC error. */
  advertiseCapacity(ad: CapacityAdvertisement, timeoutMs: number): Promise<void>;
  /** Idempotent. */
  close(): void;
}

/** The 2018 proto as protobufjs's JSON descriptor (keepCase field names), with the two well-known types it imports. */
const DESCRIPTOR = {
  nested: {
    google: {
      nested: {
        protobuf: {
          nested: {
            Timestamp: { fields: { seconds: { type: 'int64', id: 1 }, nanos: { type: 'int32', id: 2 } } },
            Empty: { fields: {} },
          },
        },
      },
    },
    Runner: { fields: { address: { type: 'string', id: 1 }, client_key: { type: 'bytes', id: 2 } } },
    LBGroupId: { fields: { id: { type: 'string', id: 1 } } },
    LBGroupMembership: { fields: { group_id: { type: 'LBGroupId', id: 1 }, runners: { rule: 'repeated', type: 'Runner', id: 2 } } },
    CapacitySnapshot: { fields: { group_id: { type: 'LBGroupId', id: 1 }, mem_mb_total: { type: 'uint64', id: 2 } } },
    CapacitySnapshotList: {
      fields: { ts: { type: 'google.protobuf.Timestamp', id: 1 }, lb_id: { type: 'string', id: 2 }, snapshots: { rule: 'repeated', type: 'CapacitySnapshot', id: 3 } },
    },
    NodePoolScaler: { methods: { AdvertiseCapacity: { requestType: 'CapacitySnapshotList', responseType: 'google.protobuf.Empty' } } },
    RunnerManager: { methods: { GetLBGroup: { requestType: 'LBGroupId', responseType: 'LBGroupMembership' } } },
  },
};

interface LBGroupMembershipMsg {
  group_id?: { id: string };
  runners: { address: string; client_key: Buffer }[];
}

interface CapacitySnapshotListMsg {
  ts: { seconds: number; nanos: number };
  lb_id: string;
  snapshots: { group_id: { id: string }; mem_mb_total: number }[];
}

type Unary<Req, Res> = (request: Req, metadata: grpc.Metadata, options: grpc.CallOptions, callback: grpc.requestCallback<Res>) => grpc.ClientUnaryCall;

interface RunnerManagerClient extends grpc.Client {
  GetLBGroup: Unary<{ id: string }, LBGroupMembershipMsg>;
}

interface NodePoolScalerClient extends grpc.Client {
  AdvertiseCapacity: Unary<CapacitySnapshotListMsg, Record<string, never>>;
}

type Constructor<C> = new (address: string, credentials: grpc.ChannelCredentials, options?: grpc.ChannelOptions) => C;

let loaded: { RunnerManager: Constructor<RunnerManagerClient>; NodePoolScaler: Constructor<NodePoolScalerClient> } | undefined;

/** The two services' client classes, built once. */
function protocol(): NonNullable<typeof loaded> {
  if (!loaded) {
    // protobufjs's INamespace types ask for a comment on each method, which the descriptor format leaves optional.
    const definition = fromJSON(DESCRIPTOR as Parameters<typeof fromJSON>[0], { keepCase: true, longs: Number, defaults: true });
    loaded = grpc.loadPackageDefinition(definition) as unknown as NonNullable<typeof loaded>;
  }
  return loaded;
}

/** One unary call as a promise, with a deadline. */
function unary<Req, Res>(method: Unary<Req, Res>, client: grpc.Client, request: Req, timeoutMs: number): Promise<Res> {
  return new Promise((resolve, reject) => {
    method.call(client, request, new grpc.Metadata(), { deadline: Date.now() + timeoutMs }, (err, res) => (err || res === undefined ? reject(err ?? new Error('no answer')) : resolve(res)));
  });
}

export class PoolManagerClient implements PoolManagerApi {
  private readonly runners: RunnerManagerClient;
  private readonly scaler: NodePoolScalerClient;

  constructor(
    readonly address: string,
    credentials: grpc.ChannelCredentials = grpc.credentials.createInsecure(),
  ) {
    const { RunnerManager, NodePoolScaler } = protocol();
    this.runners = new RunnerManager(address, credentials, { 'grpc.initial_reconnect_backoff_ms': 100, 'grpc.max_reconnect_backoff_ms': 2_000 });
    // One channel for both services.
    this.scaler = new NodePoolScaler(address, credentials, { channelOverride: this.runners.getChannel() });
  }

  async getLBGroup(group: string, timeoutMs: number): Promise<string[]> {
    const membership = await unary(this.runners.GetLBGroup, this.runners, { id: group }, timeoutMs);
    return membership.runners.map((r) => r.address);
  }

  async advertiseCapacity(ad: CapacityAdvertisement, timeoutMs: number): Promise<void> {
    const request: CapacitySnapshotListMsg = {
      ts: { seconds: Math.floor(ad.at / 1000), nanos: (ad.at % 1000) * 1_000_000 },
      lb_id: ad.lbId,
      snapshots: ad.snapshots.map((s) => ({ group_id: { id: s.group }, mem_mb_total: s.memMbTotal })),
    };
    await unary(this.scaler.AdvertiseCapacity, this.scaler, request, timeoutMs);
  }

  close(): void {
    this.runners.close();
  }
}
