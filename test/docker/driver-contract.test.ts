/**
 * The Docker driver against the driver contract, on the real engine, with
 * the hardening a server uses (unprivileged, read-only root, pid and file
 * limits). Every container carries the run's tag, so the leak check sees
 * anything the suite failed to remove.
 */
import Docker from 'dockerode';
import { describe, expect, it } from 'vitest';
import { TAG_LABEL } from '../../src/agent/index.js';
import { runDriverContract } from '../../src/drivers/driver.contract.js';
import { DockerDriver, DriverError } from '../../src/drivers/index.js';
import { docker, ensureFunctionImage, HELLO_FUNC_JS } from '../support/images.js';
import { RUN_TAG_ENV } from '../support/tag.js';

/** The contract's stdio programs in one image; MODE picks one. */
const PROGRAM_JS = `const mode = process.env.MODE;
if (mode === 'echo') {
  let n = 0;
  process.stdin.on('data', (c) => { n += c.length; process.stdout.write(c); });
  process.stdin.on('end', () => process.stderr.write(n + ' bytes\\n'));
} else if (mode === 'exit') {
  process.exit(Number(process.env.EXIT_CODE));
} else if (mode === 'oom') {
  const keep = [];
  for (;;) keep.push(Buffer.alloc(1 << 20, 1));
} else {
  setInterval(() => {}, 1 << 30);
}
`;

const [program, hello] = await Promise.all([ensureFunctionImage('driver-contract', PROGRAM_JS), ensureFunctionImage('hello', HELLO_FUNC_JS)]);
const tag = process.env[RUN_TAG_ENV];

const options = { pullTimeoutMs: 10_000, maxPids: 50, maxOpenFiles: 350, readOnlyRootfs: true, unprivileged: true };

runDriverContract('docker', () => new DockerDriver({ docker: docker(), ...options }), {
  echo: { image: program, env: { MODE: 'echo' } },
  exit: { image: program, env: { MODE: 'exit', EXIT_CODE: '3' }, code: 3 },
  oom: { image: program, env: { MODE: 'oom' } },
  forever: { image: program, env: { MODE: 'forever' } },
  httpStream: { image: hello },
  missingImage: 'fnts-test/driver-contract-absent:none',
  labels: tag ? { [TAG_LABEL]: tag } : {},
});

describe('DockerDriver.ping', () => {
  it('says the engine does not answer, and why, when nothing listens at DOCKER_HOST', async () => {
    const driver = new DockerDriver({ docker: new Docker({ socketPath: '/nonexistent/docker.sock' }), ...options });
    const err: unknown = await driver.ping().then(
      () => undefined,
      (e: unknown) => e,
    );
    expect(err).toBeInstanceOf(DriverError);
    expect((err as Error).message).toMatch(/^the Docker engine does not answer: .*ENOENT/);
  });
});
