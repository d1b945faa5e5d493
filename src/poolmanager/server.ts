/**
 * The pool manager's gRPC face (proto/fn-poolmanager.proto):
 * `NodePoolScaler.AdvertiseCapacity` records what an LB needs per group,
 * `RunnerManager.GetLBGroup` answers a group's active runners, oldest first
 * (PoolManager.membership).
 */
import * as grpc from '@grpc/grpc-js';
import type { Logger } from 'pino';
import { bindServer, shutdownServer, poolManagerProtocol, type CapacitySnapshotListMsg, type LBGroupIdMsg, type LBGroupMembershipMsg } from '../rpc/index.js';
import type { CapacityBook } from './capacity.js';
import { checkGroup } from './control-plane.js';
import type { PoolManager } from './manager.js';

export interface PoolManagerServerOptions {
  readonly manager: PoolManager;
  readonly book: CapacityBook;
  readonly log: Logger;
  /** TLS (mutual, as between LBs and runners); plaintext when absent. */
  readonly credentials?: grpc.ServerCredentials;
  /** ms since the epoch; injectable for tests. */
  readonly clock?: () => number;
}

function invalid(message: string): Partial<grpc.StatusObject> {
  return { code: grpc.status.INVALID_ARGUMENT, details: message };
}

export class PoolManagerServer {
  private readonly server = new grpc.Server();

  constructor(private readonly o: PoolManagerServerOptions) {
    const { NodePoolScaler, RunnerManager } = poolManagerProtocol();
    const clock = o.clock ?? Date.now;
    this.server.addService(NodePoolScaler.service, {
      AdvertiseCapacity: (call: grpc.ServerUnaryCall<CapacitySnapshotListMsg, object>, callback: grpc.sendUnaryData<object>) => {
        const { lb_id: lbId, snapshots } = call.request;
        if (!lbId) return callback(invalid('lb_id is empty: each LB names itself, the same name for its whole life'));
        const needs: Array<[string, number]> = [];
        for (const s of snapshots) {
          const group = s.group_id?.id ?? '';
          try {
            checkGroup(group);
          } catch (err) {
            return callback(invalid((err as Error).message));
          }
          needs.push([group, Number(s.mem_mb_total)]);
        }
        o.book.advertise(lbId, needs, clock());
        o.log.debug({ lb: lbId, needs }, 'capacity advertised');
        callback(null, {});
      },
    });
    this.server.addService(RunnerManager.service, {
      GetLBGroup: (call: grpc.ServerUnaryCall<LBGroupIdMsg, LBGroupMembershipMsg>, callback: grpc.sendUnaryData<LBGroupMembershipMsg>) => {
        const group = call.request.id;
        try {
          checkGroup(group);
        } catch (err) {
          return callback(invalid((err as Error).message));
        }
        const runners = o.manager.membership(group).map((address) => ({ address, client_key: Buffer.alloc(0) }));
        callback(null, { group_id: { id: group }, runners });
      },
    });
  }

  /** Binds the gRPC port (0: any free port) and answers with the port bound. */
  listen(host: string, port: number): Promise<number> {
    return bindServer(this.server, host, port, this.o.credentials);
  }

  /** Stops serving; requests in flight get a second to finish. Idempotent. */
  close(): Promise<void> {
    return shutdownServer(this.server);
  }
}
