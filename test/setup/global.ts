/**
 * Runs once around the suite: brings dist/ up to date (end-to-end tests start
 * the real `fnts` binary), checks that the Docker engine answers, builds the
 * Node base image the container tests share, and afterwards fails the run if
 * any test left a container of fnts's behind.
 */
import { execFileSync } from 'node:child_process';
import { OWNER_LABEL } from '../../src/agent/index.js';
import { docker, dockerReachable, ensureNodeBaseImage } from '../support/images.js';

async function fntsContainers(): Promise<Map<string, string>> {
  const list = await docker().listContainers({ all: true, filters: { label: [OWNER_LABEL] } });
  return new Map(list.map((c) => [c.Id, `${c.Names[0] ?? c.Id} (${c.Image}, ${c.State})`]));
}

export default async function setup(): Promise<() => Promise<void>> {
  execFileSync(process.execPath, ['scripts/prepare.mjs'], { stdio: 'inherit' });
  if (!(await dockerReachable())) {
    throw new Error(
      'The Docker engine does not answer on /var/run/docker.sock. The tests run real containers: ' +
        'run .ci/run (it installs and starts dockerd), or start dockerd yourself, then run npm test again.',
    );
  }
  await ensureNodeBaseImage();
  const before = await fntsContainers();

  return async () => {
    const leaked = [...(await fntsContainers()).entries()].filter(([id]) => !before.has(id));
    if (leaked.length === 0) return;
    await Promise.all(leaked.map(([id]) => docker().getContainer(id).remove({ force: true }).catch(() => undefined)));
    // Thrown errors in a teardown do not fail the run: say so and set the exit code.
    process.stderr.write(`\nFAIL: tests left ${leaked.length} container(s) behind (now removed):\n${leaked.map(([, d]) => `  ${d}`).join('\n')}\n`);
    process.exitCode = 1;
  };
}
