/**
 * The docker control plane against the contract, on the real engine: real
 * runner containers of the fnts image (npm run image:runner), each
 * answering RunnerProtocol.Status on its published port. Runner containers
 * carry the run's tag, so the run's leak check sees any left behind.
 */
import { randomBytes } from 'node:crypto';
import { rmSync } from 'node:fs';
import { afterAll } from 'vitest';
import { TAG_LABEL } from '../../src/agent/index.js';
import { runControlPlaneContract } from '../../src/poolmanager/control-plane.contract.js';
import { DockerPlane } from '../../src/poolmanager/planes/docker.js';
import { docker, ensureRunnerImage } from '../support/images.js';
import { RUN_TAG_ENV } from '../support/tag.js';

const image = await ensureRunnerImage();
const tag = process.env[RUN_TAG_ENV];
const iofsRoot = `/tmp/fnts-pool-${randomBytes(3).toString('hex')}`;

afterAll(() => rmSync(iofsRoot, { recursive: true, force: true }));

runControlPlaneContract(
  'docker',
  () =>
    new DockerPlane({
      docker: docker(),
      image,
      manager: `test-${randomBytes(3).toString('hex')}`,
      iofsRoot,
      runnerMemMb: 256,
      runnerEnv: { FN_LOG_LEVEL: 'warn', ...(tag ? { [RUN_TAG_ENV]: tag } : {}) },
      labels: tag ? { [TAG_LABEL]: tag } : {},
      stopTimeoutS: 10,
    }),
  { live: true, startMs: 20_000 },
);
