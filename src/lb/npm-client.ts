/**
 * The LB's side of Fn's 2018 pool manager protocol
 * (proto/fn-poolmanager.proto): it tells the manager what each runner group
 * needs (NodePoolScaler.AdvertiseCapacity) and asks it which runners a group
 * has (RunnerManager.GetLBGroup), through the protocol's client
 * (rpc/poolmanager-protocol.ts), behind the seam the pool and its tests use.
 */
import { poolManagerClient, type ChannelTls, type PoolManagerClient as ManagerClient } from '../rpc/index.js';

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
  /** The group's active runners' addresses, in the manager's order. Rejects with a GrpcError. */
  getLBGroup(group: string, timeoutMs: number): Promise<string[]>;
  /** Rejects with a GrpcError. */
  advertiseCapacity(ad: CapacityAdvertisement, timeoutMs: number): Promise<void>;
  /** Idempotent. */
  close(): void;
}

/** The pool manager at `address` (FN_NPM_ADDRESS), one channel for both services; mutual TLS with `tls` (FNTS_GRPC_TLS_*). */
export class PoolManagerClient implements PoolManagerApi {
  private readonly client: ManagerClient;

  constructor(
    readonly address: string,
    tls?: ChannelTls,
  ) {
    this.client = poolManagerClient(address, { tls });
  }

  getLBGroup(group: string, timeoutMs: number): Promise<string[]> {
    return this.client.getLBGroup(group, timeoutMs);
  }

  advertiseCapacity(ad: CapacityAdvertisement, timeoutMs: number): Promise<void> {
    const needs: Record<string, number> = {};
    for (const s of ad.snapshots) needs[s.group] = s.memMbTotal;
    return this.client.advertiseCapacity(ad.lbId, needs, timeoutMs);
  }

  close(): void {
    this.client.close();
  }
}
