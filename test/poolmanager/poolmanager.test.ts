/**
 * The pool manager as users run it: the real `fnts` process in the
 * poolmanager role, with the docker control plane and the fnts image
 * (npm run image:runner), the whole fleet under mutual TLS with
 * certificates `fnts certs` made. An LB's advertisements (over gRPC, as an
 * LB sends them) make it start a runner container, which gets the manager's
 * certificate files mounted read-only and serves TLS only; a call placed on
 * that runner by a real LB with its own certificate runs in a function
 * container the runner started beside itself on the host engine, on the
 * network the manager fenced for them (a runner in a container cannot reach
 * the host's iptables); when the advertisements stop the runner drains and
 * is removed, its containers with it.
 */
import { randomBytes } from 'node:crypto';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { createServer, type AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { INSTANCE_LABEL } from '../../src/agent/index.js';
import { makeCerts } from '../../src/cli/certs.js';
import { poolManagerClient, RunnerClient, type ChannelTls, type PoolManagerClient } from '../../src/rpc/index.js';
import { DEFAULT_NETWORK } from '../../src/drivers/index.js';
import { MANAGER_LABEL } from '../../src/poolmanager/planes/index.js';
import { containersOfFn } from '../support/containers.js';
import { netprobeImage } from '../support/functions.js';
import { docker, ensureFunctionImage, ensureRunnerImage, HELLO_FUNC_JS } from '../support/images.js';
import { startFnts, type FntsProcess } from '../support/process.js';
import { startTestServer, type TestServer } from '../support/server.js';
import { eventually } from '../support/wait.js';

const name = `test-${randomBytes(3).toString('hex')}`;
const iofs = `/tmp/fnts-pool-${randomBytes(3).toString('hex')}`;
const certs = mkdtempSync(join(tmpdir(), 'fnts-pm-certs-'));
/** The FNTS_GRPC_TLS_* of node `name`, as fnts certs names its files. */
const tlsOf = (name: string): Record<string, string> => ({
  FNTS_GRPC_TLS_CERT: join(certs, `${name}.crt`),
  FNTS_GRPC_TLS_KEY: join(certs, `${name}.key`),
  FNTS_GRPC_TLS_CA: join(certs, 'ca.crt'),
});
const channelTls = (name: string): ChannelTls => ({ ca: readFileSync(join(certs, 'ca.crt')), cert: readFileSync(join(certs, `${name}.crt`)), key: readFileSync(join(certs, `${name}.key`)) });

async function runnerContainers(): Promise<string[]> {
  return (await docker().listContainers({ all: true, filters: { label: [`${MANAGER_LABEL}=${name}`] } })).map((c) => c.Names[0]!.slice(1));
}

describe('FN_NODE_TYPE=poolmanager with the docker control plane, under mutual TLS', () => {
  let manager: FntsProcess;
  let client: PoolManagerClient;
  let hello: string;
  let netprobe: string;
  /** A port of this host on every address, as a database's would be. */
  const hostPort = createServer((c) => c.on('error', () => undefined).end());
  let api: TestServer | undefined;
  let lb: TestServer | undefined;

  beforeAll(async () => {
    const [image] = await Promise.all([ensureRunnerImage(), ensureFunctionImage('hello', HELLO_FUNC_JS).then((h) => (hello = h)), netprobeImage().then((n) => (netprobe = n))]);
    // Runners are dialled at 127.0.0.1 (the docker plane's default) and present the manager's certificate.
    await makeCerts({ out: certs, names: ['poolmanager', 'lb'], hosts: ['127.0.0.1'], say: () => undefined });
    manager = await startFnts({
      ...tlsOf('poolmanager'),
      FN_NODE_TYPE: 'poolmanager',
      FN_GRPC_PORT: '0',
      FN_LOG_LEVEL: 'info',
      FN_LOG_FORMAT: 'text',
      FNTS_CONTROL_PLANE: 'docker',
      FNTS_RUNNER_IMAGE: image,
      FNTS_POOL_NAME: name,
      FNTS_POOL_IOFS_PATH: iofs,
      FNTS_MIN_RUNNERS: '0',
      FNTS_RUNNER_MEMORY_MB: '512',
      FNTS_REQUIREMENT_TTL_MSECS: '1500',
      FNTS_SCALE_TICK_MSECS: '250',
      FNTS_DRAIN_GRACE_MSECS: '1000',
    });
    const port = Number(/pool manager serving on :(\d+)/.exec(manager.output())![1]);
    client = poolManagerClient(`127.0.0.1:${port}`, { tls: channelTls('lb') });
  });

  afterAll(async () => {
    hostPort.close();
    client?.close();
    await lb?.close();
    await api?.close();
    const code = await manager?.stop();
    // Runners outlive their manager by design (a restarted one takes them back); the test removes its own.
    await Promise.all((await runnerContainers()).map((c) => docker().getContainer(c).remove({ force: true })));
    rmSync(iofs, { recursive: true, force: true });
    rmSync(certs, { recursive: true, force: true });
    expect(code).toBe(0);
  });

  it("starts a runner for an LB's demand, runs a call on it, and drains and removes it once the demand stops", async () => {
    expect(await client.getLBGroup('default')).toEqual([]);
    // An LB advertising 300 MB of calls in flight, twice a second.
    const advertise = setInterval(() => void client.advertiseCapacity('lb-test', { default: 300 }).catch(() => undefined), 500);
    let address: string | undefined;
    try {
      const asked = Date.now();
      await client.advertiseCapacity('lb-test', { default: 300 });
      expect(await eventually(async () => (address = (await client.getLBGroup('default'))[0]) !== undefined, 30_000, 100), manager.output()).toBe(true);
      console.log(`first advertisement to the runner in the membership: ${Date.now() - asked} ms`);
      expect(await runnerContainers()).toHaveLength(1);
      expect(manager.output()).toMatch(/the pool manager's gRPC port serves mutual TLS/);

      // The runner has the manager's files, read-only, and serves TLS only: a client without a certificate gets no answer.
      const [container] = await runnerContainers();
      const mounts = (await docker().getContainer(container!).inspect()).Mounts.filter((m) => m.Destination.startsWith('/run/fnts/tls/'));
      expect(mounts.map((m) => [m.Source, m.Destination, m.RW]).sort()).toEqual(
        [
          [join(certs, 'ca.crt'), '/run/fnts/tls/ca.pem', false],
          [join(certs, 'poolmanager.crt'), '/run/fnts/tls/cert.pem', false],
          [join(certs, 'poolmanager.key'), '/run/fnts/tls/key.pem', false],
        ].sort(),
      );
      const plain = new RunnerClient(address!);
      try {
        await expect(plain.status(1000)).rejects.toThrow();
      } finally {
        plain.close();
      }

      api = await startTestServer({ FN_NODE_TYPE: 'api' });
      lb = await startTestServer({ FN_NODE_TYPE: 'lb', FN_RUNNER_API_URL: api.url, FN_RUNNER_ADDRESSES: address!, ...tlsOf('lb') });
      const app = await api.app();
      const fn = await api.fn(app, hello);
      const res = await lb.invoke(fn.id, { name: 'managed fleet' });
      expect(res.status, res.text).toBe(200);
      expect(res.json).toEqual({ message: 'Hello managed fleet' });

      // The runner runs in a container, where the host's iptables are out of reach: its functions join the network the manager fenced for them.
      const port = await new Promise<number>((resolve) => hostPort.listen(0, '0.0.0.0', () => resolve((hostPort.address() as AddressInfo).port)));
      const probe = await api.fn(app, netprobe);
      const seen = await lb.invoke(probe.id, { connect: [{ host: 'gateway', port }] });
      expect(seen.status, seen.text).toBe(200);
      expect(seen.json.connects[0]).toMatchObject({ outcome: 'EHOSTUNREACH' });
      const [fnContainer] = await containersOfFn(probe.id);
      expect(Object.keys(fnContainer!.NetworkSettings.Networks)).toEqual([DEFAULT_NETWORK]);

      const metrics = await fetch(`${manager.url}/metrics`).then((r) => r.text());
      expect(metrics).toContain('fnts_pool_runners{group="default",state="active"} 1');
      expect(metrics).toMatch(/fnts_pool_provisioned_total\{group="default"\} 1\b/);
      expect(metrics).toContain('fnts_pool_lbs 1');
    } finally {
      clearInterval(advertise);
    }

    // The demand expires: the runner leaves the membership at once, then goes with its function container.
    const [runner] = await runnerContainers();
    expect(await eventually(async () => (await client.getLBGroup('default')).length === 0, 10_000, 200)).toBe(true);
    expect(await eventually(async () => (await runnerContainers()).length === 0, 30_000, 250), manager.output()).toBe(true);
    const left = await docker().listContainers({ all: true, filters: { label: [INSTANCE_LABEL] } });
    expect(left.filter((c) => c.Labels[INSTANCE_LABEL]!.startsWith(`${runner}/`))).toEqual([]);
    const metrics = await fetch(`${manager.url}/metrics`).then((r) => r.text());
    expect(metrics).toMatch(/fnts_pool_removed_total\{group="default"\} 1\b/);
    expect(manager.output()).toMatch(/an LB stopped advertising/);
  });

  it('refuses a group name no control plane can use, saying what a name may hold', async () => {
    const err = await client.getLBGroup('Not Valid').then(
      () => undefined,
      (e: unknown) => e as Error,
    );
    expect(err?.message).toMatch(/INVALID_ARGUMENT: runner group 'Not Valid' is not a valid name/);
  });
});
