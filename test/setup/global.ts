/**
 * Runs once before the suite: brings dist/ up to date (end-to-end tests start
 * the real `fnts` binary), checks that the Docker engine answers, and builds
 * the Node base image the container tests share.
 */
import { execFileSync } from 'node:child_process';
import { dockerReachable, ensureNodeBaseImage } from '../support/images.js';

export default async function setup(): Promise<void> {
  execFileSync(process.execPath, ['scripts/prepare.mjs'], { stdio: 'inherit' });
  if (!(await dockerReachable())) {
    throw new Error(
      'The Docker engine does not answer on /var/run/docker.sock. The tests run real containers: ' +
        'run .ci/run (it installs and starts dockerd), or start dockerd yourself, then run npm test again.',
    );
  }
  await ensureNodeBaseImage();
}
