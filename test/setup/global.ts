/**
 * Runs once around the suite: brings dist/ up to date (end-to-end tests start
 * the real `fnts` binary), checks that the Docker engine answers, builds the
 * Node base image the container tests share, picks this run's container tag
 * (every server a test starts labels its containers with it), and afterwards
 * fails the run if any test left a container behind. Only this run's
 * containers are looked at and removed: a user's own fnts server, or another
 * run on the same engine, is left alone.
 */
import { execFileSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { docker, dockerReachable, ensureNodeBaseImage } from '../support/images.js';
import { containersOfRun } from '../support/containers.js';
import { RUN_TAG_ENV } from '../support/tag.js';

/** Set once the setup has run in this vitest process. */
const SETUP_DONE = 'FNTS_TEST_GLOBAL_SETUP_DONE';

export default async function setup(): Promise<() => Promise<void>> {
  // The docker and fleet projects share this setup: the run's first does it, for both (its teardown runs after all).
  if (process.env[SETUP_DONE]) return async () => undefined;
  process.env[SETUP_DONE] = '1';
  execFileSync(process.execPath, ['scripts/prepare.mjs'], { stdio: 'inherit' });
  if (!(await dockerReachable())) {
    throw new Error(
      'The Docker engine does not answer on /var/run/docker.sock. The tests run real containers: ' +
        'run .ci/run (it installs and starts dockerd), or start dockerd yourself, then run npm test again.',
    );
  }
  await ensureNodeBaseImage();
  // Test workers are forked after this runs and inherit the variable.
  const tag = `test-${process.pid}-${randomBytes(4).toString('hex')}`;
  process.env[RUN_TAG_ENV] = tag;

  return async () => {
    const leaked = await containersOfRun(tag);
    if (leaked.length === 0) return;
    await Promise.all(
      leaked.map((c) =>
        docker()
          .getContainer(c.Id)
          .remove({ force: true })
          .catch(() => undefined),
      ),
    );
    // Thrown errors in a teardown do not fail the run: say so and set the exit code.
    const described = leaked.map((c) => `  ${c.Names[0] ?? c.Id} (${c.Image}, ${c.State})`).join('\n');
    process.stderr.write(`\nFAIL: tests left ${leaked.length} container(s) behind (now removed):\n${described}\n`);
    process.exitCode = 1;
  };
}
