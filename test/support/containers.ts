/**
 * Which containers are whose, as the Docker engine tells it, by the labels
 * the agent puts on every container it starts:
 *
 *   fnts.tag     the test run (FN_CONTAINER_LABEL_TAG, see tag.ts): what the
 *                run's leak check looks at, and nothing else (a user's own
 *                fnts server on the same engine, or another run, is none of
 *                the suite's business)
 *   fnts.owner   the server's data directory: what one server started
 *   fnts.fn_id   the fn the container serves
 *
 * Every listing includes stopped containers: a container that exited but
 * was not removed is still a leak.
 */
import type Docker from 'dockerode';
import { OWNER_LABEL, TAG_LABEL } from '../../src/agent/index.js';
import { compileConfig } from '../../src/config/index.js';
import { docker } from './images.js';

/** The label the agent puts the fn's id in (src/agent/agent.ts does not export it). */
export const FN_ID_LABEL = 'fnts.fn_id';

function withLabel(label: string, value: string): Promise<Docker.ContainerInfo[]> {
  return docker().listContainers({ all: true, filters: { label: [`${label}=${value}`] } });
}

/** The containers of a test run, by its tag. */
export function containersOfRun(tag: string): Promise<Docker.ContainerInfo[]> {
  return withLabel(TAG_LABEL, tag);
}

/** The containers a server started, by its owner (config.agent.owner, or ownerOf(dbUrl)). */
export function containersOfOwner(owner: string): Promise<Docker.ContainerInfo[]> {
  return withLabel(OWNER_LABEL, owner);
}

/** The containers serving one fn. Fn ids are unique, so no owner is needed. */
export function containersOfFn(fnId: string): Promise<Docker.ContainerInfo[]> {
  return withLabel(FN_ID_LABEL, fnId);
}

/**
 * Whether a container of `fnId` runs a process titled `title`: a probe call
 * asked for {"title": title} has arrived in it (functions.ts).
 */
export async function fnShowsTitle(fnId: string, title: string): Promise<boolean> {
  for (const c of await containersOfFn(fnId)) {
    const top = (await docker()
      .getContainer(c.Id)
      .top()
      .catch(() => undefined)) as { Titles: string[]; Processes: string[][] } | undefined;
    const cmd = top?.Titles.indexOf('CMD') ?? -1;
    if (top && cmd >= 0 && top.Processes.some((p) => p[cmd] === title)) return true;
  }
  return false;
}

/** The owner a server on this database labels its containers with. */
export function ownerOf(dbUrl: string): string {
  return compileConfig({ FN_DB_URL: dbUrl }).agent.owner;
}
