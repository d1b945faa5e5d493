/**
 * A pure runner fences its functions as a full node does (the same agent
 * and driver: src/drivers/docker/network.ts): a function placed on it by
 * an LB cannot reach the runner's HTTP port, its gRPC port (FN_GRPC_PORT,
 * where an LB's TryCall would run any image), nor the LB's port. Every
 * process listens on all addresses, as by default, so that only the fence
 * stands in the way; test/docker/isolation.test.ts shows the same function
 * reaching such ports without it.
 */
import { randomBytes } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { netprobeImage } from '../support/functions.js';
import { docker, dockerReachable } from '../support/images.js';
import { startTestServer, type TestServer } from '../support/server.js';

const engine = await dockerReachable();
const net = `fnts-it-${randomBytes(3).toString('hex')}-runner`;

describe.skipIf(!engine)('a pure runner fences its functions off from the fleet', () => {
  let api: TestServer;
  let runner: TestServer;
  let lb: TestServer;
  let image: string;

  beforeAll(async () => {
    image = await netprobeImage();
    api = await startTestServer({ FN_NODE_TYPE: 'api', FN_LISTEN_HOST: '0.0.0.0' });
    runner = await startTestServer({ FN_NODE_TYPE: 'pure-runner', FN_GRPC_PORT: '0', FN_LISTEN_HOST: '0.0.0.0', FNTS_FUNCTION_NETWORK_NAME: net });
    lb = await startTestServer({ FN_NODE_TYPE: 'lb', FN_LISTEN_HOST: '0.0.0.0', FN_RUNNER_API_URL: api.url, FN_RUNNER_ADDRESSES: `127.0.0.1:${runner.server.grpcPort}` });
  });

  afterAll(async () => {
    await lb?.close();
    await runner?.close();
    await api?.close();
  });

  it("a function on the runner fails at once to reach the runner's HTTP and gRPC ports and the LB's port; the runner's /ready says its functions are fenced", async () => {
    const fn = await api.fn(await api.app(), image);
    const res = await lb.invoke(fn.id, {
      connect: [
        { host: 'gateway', port: runner.server.port },
        { host: 'gateway', port: runner.server.grpcPort },
        { host: 'gateway', port: lb.server.port },
        { host: 'gateway', port: api.server.port },
      ],
    });
    expect(res.status, res.text).toBe(200);
    const seen = res.json as { connects: Array<{ port: number; outcome: string; ms: number }> };
    for (const c of seen.connects) {
      expect(c.outcome, `port ${c.port}`).toBe('EHOSTUNREACH');
      expect(c.ms, `port ${c.port}`).toBeLessThan(1000);
    }
    expect((await runner.containers()).map((c) => Object.keys(c.NetworkSettings.Networks))).toEqual([[net]]);
    expect((await runner.call('/ready', { method: 'GET' })).json).toEqual({ status: 'ready', checks: { docker: 'ok', network: 'ok' } });
  });

  it('the runner, the last user of its network, removes it when it stops', async () => {
    await runner.close();
    expect(
      await docker()
        .getNetwork(net)
        .inspect()
        .then(
          () => true,
          () => false,
        ),
    ).toBe(false);
  });
});
