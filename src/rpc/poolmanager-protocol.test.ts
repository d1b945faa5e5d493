/**
 * The pool manager protocol on the fleet's own gRPC server and channel,
 * against grpc-js (another implementation) at either end: what an LB and a
 * manager of another make can read of ours.
 */
import * as grpc from '@grpc/grpc-js';
import { afterEach, describe, expect, it } from 'vitest';
import { StandInManager } from '../../test/fleet/fixtures/stand-in-npm.js';
import { grpcJsClient } from '../../test/support/grpc-js.js';
import type { CapacitySnapshotList } from './gen/fn-poolmanager.js';
import { poolManagerClient, poolManagerMethods, type PoolManagerClient } from './poolmanager-protocol.js';
import { GrpcH2Server } from './server.js';
import { GrpcError, GrpcStatus } from './wire.js';

const closers: Array<() => unknown> = [];
afterEach(async () => {
  for (const close of closers.splice(0).reverse()) await close();
});

/** A manager on GrpcH2Server whose group 'default' has two runners; 'Bad Name' is refused as the real one refuses it. */
async function manager(): Promise<{ port: number; ads: CapacitySnapshotList[] }> {
  const ads: CapacitySnapshotList[] = [];
  const invalid = (group: string): void => {
    if (group === 'Bad Name') throw new GrpcError(GrpcStatus.INVALID_ARGUMENT, `runner group '${group}' is not a valid name`);
  };
  const server = new GrpcH2Server({
    maxMessageBytes: 1 << 20,
    methods: poolManagerMethods({
      advertiseCapacity(request) {
        for (const s of request.snapshots) invalid(s.group_id?.id ?? '');
        ads.push(request);
      },
      getLBGroup({ id }) {
        invalid(id);
        return {
          group_id: { id },
          runners:
            id === 'default'
              ? [
                  { address: 'r1:9190', client_key: new Uint8Array(0) },
                  { address: 'r2:9190', client_key: new Uint8Array(0) },
                ]
              : [],
        };
      },
    }),
  });
  const port = await server.listen('127.0.0.1', 0);
  closers.push(() => server.close(200));
  return { port, ads };
}

function client(port: number): PoolManagerClient {
  const c = poolManagerClient(`127.0.0.1:${port}`, { timeoutMs: 2_000 });
  closers.push(() => c.close());
  return c;
}

describe('the pool manager protocol', () => {
  it("serves both services to grpc-js's clients, refusals with their status", async () => {
    const { port, ads } = await manager();
    const scaler = grpcJsClient('fn-poolmanager', 'NodePoolScaler', port);
    const runners = grpcJsClient('fn-poolmanager', 'RunnerManager', port);
    closers.push(
      () => scaler.close(),
      () => runners.close(),
    );
    const call = (c: typeof scaler, method: string, request: object): Promise<Record<string, unknown>> =>
      new Promise((resolve, reject) => c[method]!(request, (err: grpc.ServiceError | null, answer: Record<string, unknown>) => (err ? reject(err) : resolve(answer))));

    expect(await call(runners, 'GetLBGroup', { id: 'default' })).toMatchObject({ group_id: { id: 'default' }, runners: [{ address: 'r1:9190' }, { address: 'r2:9190' }] });
    await call(scaler, 'AdvertiseCapacity', { ts: { seconds: 1_700_000_000, nanos: 5 }, lb_id: 'lb-1', snapshots: [{ group_id: { id: 'default' }, mem_mb_total: 2 ** 40 }] });
    expect(ads).toHaveLength(1);
    expect(ads[0]!.lb_id).toBe('lb-1');
    expect(ads[0]!.ts?.seconds).toBe(1_700_000_000);
    expect(ads[0]!.snapshots[0]!.mem_mb_total).toBe(2 ** 40);

    const refused = await call(runners, 'GetLBGroup', { id: 'Bad Name' }).catch((err: grpc.ServiceError) => err);
    expect(refused).toMatchObject({ code: grpc.status.INVALID_ARGUMENT, details: "runner group 'Bad Name' is not a valid name" });
  });

  it('lets an LB ask and advertise over the same channel, and rejects with the status (typed) when the manager refuses', async () => {
    const { port, ads } = await manager();
    const c = client(port);
    expect(await c.getLBGroup('default')).toEqual(['r1:9190', 'r2:9190']);
    expect(await c.getLBGroup('empty')).toEqual([]);
    await c.advertiseCapacity('lb-2', { default: 127.2, other: -3 });
    expect(ads[0]!.snapshots.map((s) => [s.group_id?.id, s.mem_mb_total])).toEqual([
      ['default', 128],
      ['other', 0],
    ]);
    expect(Math.abs(ads[0]!.ts!.seconds * 1000 - Date.now())).toBeLessThan(5_000);

    const err = await c.getLBGroup('Bad Name').catch((e: unknown) => e);
    expect(err).toBeInstanceOf(GrpcError);
    expect((err as GrpcError).code).toBe(GrpcStatus.INVALID_ARGUMENT);
    expect((err as GrpcError).message).toBe("3 INVALID_ARGUMENT: runner group 'Bad Name' is not a valid name");
  });

  it("calls grpc-js's server (another manager's), and fails UNAVAILABLE, at once, where nothing listens", async () => {
    const stand = new StandInManager();
    await stand.start();
    closers.push(() => stand.close());
    stand.members.set('default', ['r9:9190']);
    const c = client(stand.port);
    expect(await c.getLBGroup('default')).toEqual(['r9:9190']);
    await c.advertiseCapacity('lb-3', { default: 64 });
    expect(stand.need('default')).toBe(64);
    expect(stand.ads[0]!.lb_id).toBe('lb-3');

    stand.close();
    const gone = client(stand.port);
    const err = await gone.getLBGroup('default').catch((e: unknown) => e);
    expect(err).toBeInstanceOf(GrpcError);
    expect((err as GrpcError).code).toBe(GrpcStatus.UNAVAILABLE);
  });
});
