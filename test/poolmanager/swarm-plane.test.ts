/**
 * The swarm control plane against the contract, on the real engine in
 * swarm mode: a service per group, real runner tasks of the fnts image
 * (npm run image:runner) answering RunnerProtocol.Status on the host ports
 * swarm published. An engine not in a swarm is made a one-node swarm
 * (docker swarm init) and left so: .ci/run does the same.
 */
import { execFileSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { rmSync } from 'node:fs';
import { afterAll } from 'vitest';
import { TAG_LABEL } from '../../src/agent/index.js';
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
  rmSync(iofsRoot, { recursive: true, force: true });
});

runControlPlaneContract(
  'swarm',
  () =>
    new SwarmPlane({
      image,
      manager,
      iofsRoot,
      runnerMemMb: 256,
      publishHost: '127.0.0.1',
      runnerEnv: { FN_LOG_LEVEL: 'warn', ...(tag ? { [RUN_TAG_ENV]: tag } : {}) },
      labels: tag ? { [TAG_LABEL]: tag } : {},
      stopTimeoutS: 10,
    }),
  { live: true, startMs: 30_000 },
);
