/**
 * The suite's leak check looks at this run's containers only: a container
 * of a user's own fnts server on the same engine is neither reported nor
 * removed.
 */
import { afterAll, describe, expect, it } from 'vitest';
import { OWNER_LABEL, TAG_LABEL } from '../../src/agent/index.js';
import { docker, ensureNodeBaseImage } from '../support/images.js';
import { containersOfRun } from '../support/containers.js';
import { RUN_TAG_ENV } from '../support/tag.js';

const made: string[] = [];
afterAll(async () => {
  await Promise.all(
    made.map((id) =>
      docker()
        .getContainer(id)
        .remove({ force: true })
        .catch(() => undefined),
    ),
  );
});

describe('the leak check', () => {
  it("finds what this run made and leaves a user's own server's containers alone", async () => {
    const tag = process.env[RUN_TAG_ENV]!;
    expect(tag).toMatch(/^test-/);
    const image = await ensureNodeBaseImage();
    const create = async (labels: Record<string, string>) => {
      const c = await docker().createContainer({ Image: image, Cmd: ['-e', '0'], Labels: labels });
      made.push(c.id);
      return c.id;
    };
    const users = await create({ [OWNER_LABEL]: 'a-users-own-server' });
    const ours = await create({ [OWNER_LABEL]: 'a-test-server', [TAG_LABEL]: tag });
    const found = (await containersOfRun(tag)).map((c) => c.Id);
    expect(found).toContain(ours);
    expect(found).not.toContain(users);
    await docker().getContainer(ours).remove({ force: true });
  });
});
