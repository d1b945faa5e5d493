/**
 * The pool manager's gRPC face (proto/fn-poolmanager.proto), on the fleet's
 * gRPC server (rpc/server.ts, as the runners'):
 * `NodePoolScaler.AdvertiseCapacity` records what an LB needs per group,
 * `RunnerManager.GetLBGroup` answers a group's active runners, oldest first
 * (PoolManager.membership).
 */
import type { Logger } from 'pino';
import { GrpcError, GrpcH2Server, GrpcStatus, MAX_POOL_MESSAGE_BYTES, poolManagerMethods, type ServerTls } from '../rpc/index.js';
import type { CapacityBook } from './capacity.js';
import { checkGroup } from './control-plane.js';
import type { PoolManager } from './manager.js';

export interface PoolManagerServerOptions {
  readonly manager: PoolManager;
  readonly book: CapacityBook;
  readonly log: Logger;
  /** Mutual TLS (FNTS_GRPC_TLS_*, as between LBs and runners); plaintext when absent. */
  readonly tls?: ServerTls | undefined;
  /** ms since the epoch; injectable for tests. */
  readonly clock?: () => number;
}

/** A runner group's name as the control planes take it; else INVALID_ARGUMENT, saying what a name may hold. */
function validGroup(group: string): string {
  try {
    checkGroup(group);
  } catch (err) {
    throw new GrpcError(GrpcStatus.INVALID_ARGUMENT, err instanceof Error ? err.message : String(err));
  }
  return group;
}

export class PoolManagerServer {
  private readonly server: GrpcH2Server;

  constructor(o: PoolManagerServerOptions) {
    const clock = o.clock ?? Date.now;
    const methods = poolManagerMethods({
      advertiseCapacity({ lb_id: lbId, snapshots }) {
        if (!lbId) throw new GrpcError(GrpcStatus.INVALID_ARGUMENT, 'lb_id is empty: each LB names itself, the same name for its whole life');
        const needs = snapshots.map((s): [string, number] => [validGroup(s.group_id?.id ?? ''), s.mem_mb_total]);
        o.book.advertise(lbId, needs, clock());
        o.log.debug({ lb: lbId, needs }, 'capacity advertised');
      },
      getLBGroup({ id }) {
        const group = validGroup(id);
        return { group_id: { id: group }, runners: o.manager.membership(group).map((address) => ({ address, client_key: new Uint8Array(0) })) };
      },
    });
    this.server = new GrpcH2Server({ tls: o.tls, maxMessageBytes: MAX_POOL_MESSAGE_BYTES, methods, onError: (err) => o.log.warn({ err }, 'pool manager gRPC server error') });
  }

  /** Binds the gRPC port (0: any free port) and answers with the port bound; the error says FN_GRPC_PORT sets it. */
  listen(host: string, port: number): Promise<number> {
    return this.server.listen(host, port);
  }

  /** Stops serving; requests in flight get a second to finish. Idempotent. */
  close(): Promise<void> {
    return this.server.close(1000);
  }
}
