/**
 * The swarm control plane against the contract, on the real engine in
 * swarm mode: a service per group, real runner tasks of the fnts image
 * (npm run image:runner) answering RunnerProtocol.Status on the host ports
 * swarm published. An engine not in a swarm is made a one-node swarm
 * (docker swarm init) and left so: .ci/run does the same.
 *
 * Then TLS: the manager's certificate files reach every task as swarm
 * secrets, and the runners serve mutual TLS only.
 */
import { execFileSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { TAG_LABEL } from '../../src/agent/index.js';
import { makeCerts } from '../../src/cli/certs.js';
import { RunnerStatus } from '../../src/poolmanager/index.js';
import { runControlPlaneContract } from '../../src/poolmanager/control-plane.contract.js';
import { MANAGER_LABEL } from '../../src/poolmanager/planes/index.js';
import { SwarmPlane } from '../../src/poolmanager/planes/swarm.js';
import { docker, ensureRunnerImage } from '../support/images.js';
import { RUN_TAG_ENV } from '../support/tag.js';
import { eventually } from '../support/wait.js';

const info = (await docker().info()) as { Swarm?: { LocalNodeState?: string } };
if (info.Swarm?.LocalNodeState !== 'active') execFileSync('docker', ['swarm', 'init', '--advertise-addr', '127.0.0.1'], { stdio: 'ignore' });

const image = await ensureRunnerImage();
const tag = process.env[RUN_TAG_ENV];
const manager = `test-${randomBytes(3).toString('hex')}`;
const iofsRoot = `/tmp/fnts-pool-${randomBytes(3).toString('hex')}`;

afterAll(async () => {
  for (const s of await docker().listServices({ filters: { label: [`${MANAGER_LABEL}=${manager}`] } })) await docker().getService(s.ID!).remove();
  // Swarm removes the tasks' containers after the service: the run's leak check must not find them.
  await eventually(async () => (await docker().listContainers({ all: true, filters: { label: [`${MANAGER_LABEL}=${manager}`] } })).length === 0, 20_000);
  // The TLS secrets, once no task uses them.
  for (const secret of (await docker().listSecrets({ filters: { label: [`${MANAGER_LABEL}=${manager}`] } })) as unknown as Array<{ ID: string }>) await docker().getSecret(secret.ID).remove();
  rmSync(iofsRoot, { recursive: true, force: true });
});

const plane = (extra: Partial<ConstructorParameters<typeof SwarmPlane>[0]> = {}): SwarmPlane =>
  new SwarmPlane({
    image,
    manager,
    iofsRoot,
    runnerMemMb: 256,
    publishHost: '127.0.0.1',
    runnerEnv: { FN_LOG_LEVEL: 'warn', ...(tag ? { [RUN_TAG_ENV]: tag } : {}) },
    labels: tag ? { [TAG_LABEL]: tag } : {},
    stopTimeoutS: 10,
    ...extra,
  });

runControlPlaneContract('swarm', () => plane(), { live: true, startMs: 30_000 });

describe("the manager's TLS files", () => {
  const certs = mkdtempSync(join(tmpdir(), 'fnts-swarm-certs-'));
  afterAll(() => rmSync(certs, { recursive: true, force: true }));

  it('reach every task as swarm secrets, made once, and the runners serve mutual TLS only', async () => {
    await makeCerts({ out: certs, names: ['poolmanager'], hosts: ['127.0.0.1'], say: () => undefined });
    const files = { cert: join(certs, 'poolmanager.crt'), key: join(certs, 'poolmanager.key'), ca: join(certs, 'ca.crt') };
    const p = plane({ tls: files });
    // The manager's own certificate is good for its probes too (client and server auth).
    const tls = new RunnerStatus({ ca: readFileSync(files.ca), cert: readFileSync(files.cert), key: readFileSync(files.key) });
    const plain = new RunnerStatus(undefined, 1000);
    try {
      await p.provision('tls-a', 1);
      await p.provision('tls-b', 1);
      let addresses: string[] = [];
      const up = await eventually(
        async () => {
          const rs = [...(await p.runners('tls-a')), ...(await p.runners('tls-b'))];
          addresses = rs.flatMap((r) => (r.address ? [r.address] : []));
          if (addresses.length !== 2) return false;
          const answers = await Promise.all(
            addresses.map((a) =>
              tls.probe(a).then(
                () => true,
                () => false,
              ),
            ),
          );
          return answers.every(Boolean);
        },
        60_000,
        250,
      );
      expect(up, 'the TLS runners did not answer').toBe(true);
      for (const address of addresses) await expect(plain.probe(address)).rejects.toThrow();
      // One secret per file, shared by both groups' services; the key readable by the runner alone.
      const secrets = (await docker().listSecrets({ filters: { label: [`${MANAGER_LABEL}=${manager}`] } })) as unknown as Array<{ Spec: { Name: string } }>;
      expect(secrets.map((x) => x.Spec.Name.replace(/-[0-9a-f]{12}$/, '')).sort()).toEqual([`fnts-${manager}-tls-ca`, `fnts-${manager}-tls-cert`, `fnts-${manager}-tls-key`]);
      const [service] = await docker().listServices({ filters: { label: [`${MANAGER_LABEL}=${manager}`, 'fnts.pool.group=tls-a'] } });
      const refs = (service!.Spec!.TaskTemplate as { ContainerSpec: { Secrets: Array<{ File: { Name: string; Mode: number } }> } }).ContainerSpec.Secrets;
      expect(refs.map((r) => [r.File.Name, r.File.Mode]).sort()).toEqual([
        ['fnts-tls-ca.pem', 0o444],
        ['fnts-tls-cert.pem', 0o444],
        ['fnts-tls-key.pem', 0o400],
      ]);
    } finally {
      tls.close();
      plain.close();
    }
  }, 90_000);
});
