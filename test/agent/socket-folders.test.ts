/**
 * Socket folders (FN_IOFS_PATH) after a server is killed: the next server
 * of the same data directory removes every folder the dead one left (those
 * of containers it was still starting included) and none of a server that
 * still runs there; a server stopped cleanly leaves none. Real `fnts`
 * processes, real containers.
 */
import { randomBytes } from 'node:crypto';
import { mkdtempSync, readdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { probeImage } from '../support/functions.js';
import { startFnts } from '../support/process.js';
import { eventually } from '../support/wait.js';
import { withTestToken } from '../support/auth.js';

const dir = mkdtempSync(join(tmpdir(), 'fnts-folders-'));
const iofs = `/tmp/fnts-sf-${randomBytes(3).toString('hex')}`;
let probe: string;
beforeAll(async () => {
  probe = await probeImage();
});
afterAll(() => {
  rmSync(dir, { recursive: true, force: true });
  rmSync(iofs, { recursive: true, force: true });
});

/** Every container's socket folder under the root, at any depth (a container id is 26 lower-case letters and digits). */
function containerFolders(root = iofs): string[] {
  const out: string[] = [];
  for (const e of (() => {
    try {
      return readdirSync(root, { withFileTypes: true });
    } catch {
      return [];
    }
  })()) {
    if (!e.isDirectory()) continue;
    if (/^[0-9a-z]{26}$/.test(e.name)) out.push(e.name);
    else out.push(...containerFolders(join(root, e.name)));
  }
  return out.sort();
}

async function post(url: string, body: unknown): Promise<{ status: number; body: any }> {
  const res = await fetch(url, { method: 'POST', body: JSON.stringify(body), headers: withTestToken(url, { 'content-type': 'application/json' }) });
  return { status: res.status, body: await res.json().catch(() => undefined) };
}

it('removes every socket folder of a killed server, those of containers it was starting included, and none of a live server', async () => {
  const env = { FN_DB_URL: `sqlite3://${join(dir, 'fn.db')}`, FN_IOFS_PATH: iofs };
  const live = await startFnts(env);
  const app = (await post(`${live.url}/v2/apps`, { name: 'folders' })).body;
  const fn = (await post(`${live.url}/v2/fns`, { app_id: app.id, name: 'f', image: probe })).body;
  const first = await post(`${live.url}/invoke/${fn.id}`, {});
  expect(first.status).toBe(200);
  const liveFolders = containerFolders();
  expect(liveFolders).toHaveLength(1);

  // A second server on the same data directory, killed while it starts containers for four calls.
  const doomed = await startFnts(env);
  const calls = Array.from({ length: 4 }, () => post(`${doomed.url}/invoke/${fn.id}`, { sleep: 30_000 }).catch(() => undefined));
  expect(await eventually(() => containerFolders().length === 5, 15_000, 20)).toBe(true);
  const doomedFolders = containerFolders().filter((f) => !liveFolders.includes(f));
  await doomed.stop('SIGKILL');
  await Promise.all(calls);

  const next = await startFnts(env);
  try {
    expect(containerFolders()).toEqual(liveFolders);
    expect(doomedFolders).toHaveLength(4);
    // The live server still calls its function on the container it had.
    const again = await post(`${live.url}/invoke/${fn.id}`, {});
    expect(again.status).toBe(200);
    expect(again.body.hostname).toBe(first.body.hostname);
  } finally {
    expect(await next.stop()).toBe(0);
    expect(await live.stop()).toBe(0);
  }
  // Stopped cleanly, neither leaves a folder.
  expect(readdirSync(iofs)).toEqual([]);
});
