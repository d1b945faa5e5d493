import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { containersOfFn, containersOfOwner, FN_ID_LABEL, fnShowsTitle, ownerOf } from '../support/containers.js';
import { probeImage } from '../support/functions.js';
import { startFnts } from '../support/process.js';
import { startTestServer, type TestServer } from '../support/server.js';
import { eventually } from '../support/wait.js';
import { withTestToken } from '../support/auth.js';

let probe: string;
const dir = mkdtempSync(join(tmpdir(), 'fnts-life-'));
beforeAll(async () => {
  probe = await probeImage();
});
afterAll(() => rmSync(dir, { recursive: true, force: true }));

const ownedBy = (dbUrl: string) => containersOfOwner(ownerOf(dbUrl));

async function json(url: string, body: unknown): Promise<any> {
  const res = await fetch(url, { method: 'POST', body: JSON.stringify(body), headers: withTestToken(url, { 'content-type': 'application/json' }) });
  return { status: res.status, body: await res.json() };
}

describe('memory pressure', () => {
  let s: TestServer;
  beforeAll(async () => {
    s = await startTestServer({ FN_MAX_TOTAL_MEMORY_BYTES: String(300 * 1024 * 1024), FN_EJECT_IDLE_MSECS: '300' });
  });
  afterAll(async () => {
    await s?.close();
  });

  it("evicts another function's idle container when a call waits for its memory", async () => {
    const app = await s.app();
    const a = await s.fn(app, probe, { memory: 200 });
    const b = await s.fn(app, probe, { memory: 200 });
    const first = await s.invoke(a.id, {});
    expect(first.status).toBe(200);
    expect((await s.containers()).map((c) => c.Labels[FN_ID_LABEL])).toEqual([a.id]);
    const second = await s.invoke(b.id, {});
    expect(second.status).toBe(200);
    const left = await s.containers();
    expect(left.map((c) => c.Labels[FN_ID_LABEL])).toEqual([b.id]);
    expect(s.server.agent!.snapshot().containers).toBe(1);
  });
});

describe('changes to a fn with calls in flight', () => {
  let s: TestServer;
  beforeAll(async () => {
    s = await startTestServer();
  });
  afterAll(async () => {
    await s?.close();
  });

  const put = (fnId: string, body: unknown) => s.call(`/v2/fns/${fnId}`, { method: 'PUT', body, headers: { 'content-type': 'application/json' } });
  const hosts = async (fnId: string) => (await containersOfFn(fnId)).map((c) => c.Id.slice(0, 12));

  it('removes a container that was busy when its fn changed as soon as its call ends', async () => {
    const app = await s.app();
    const fn = await s.fn(app, probe);
    const warm = await s.invoke(fn.id, {});
    // Long enough for the change below to land while the call runs.
    const busy = s.invoke(fn.id, { sleep: 1000 });
    expect(await eventually(() => s.queue(fn.id)?.running === 1, 2000, 20)).toBe(true);
    expect((await put(fn.id, { memory: 256 })).status).toBe(200);
    const done = await busy;
    expect(done.status).toBe(200);
    expect(done.json.hostname).toBe(warm.json.hostname);
    // Well before the fn's idle_timeout (30 s).
    expect(await eventually(async () => !(await hosts(fn.id)).includes(warm.json.hostname), 2000)).toBe(true);
    const next = await s.invoke(fn.id, {});
    expect(next.status).toBe(200);
    expect(next.json.hostname).not.toBe(warm.json.hostname);
  });

  it('lets a container that was starting when its fn changed serve the call waiting for it, then removes it', async () => {
    const app = await s.app();
    const fn = await s.fn(app, probe);
    const first = s.invoke(fn.id, { who: 'first' });
    expect(await eventually(() => (s.queue(fn.id)?.starting ?? 0) > 0, 2000, 5)).toBe(true);
    expect((await put(fn.id, { config: { CFG_CHANGED: 'yes' } })).status).toBe(200);
    const res = await first;
    expect(res.status).toBe(200);
    expect(res.json.env.CFG_CHANGED).toBeUndefined();
    expect(await eventually(async () => !(await hosts(fn.id)).includes(res.json.hostname), 2000)).toBe(true);
    const next = await s.invoke(fn.id, {});
    expect(next.json.env.CFG_CHANGED).toBe('yes');
  });
});

describe('the server process', () => {
  it('finishes in-flight calls on SIGTERM, then removes every container it started', async () => {
    const dbUrl = `sqlite3://${join(dir, 'term', 'fn.db')}`;
    const fnts = await startFnts({ FN_DB_URL: dbUrl });
    const app = (await json(`${fnts.url}/v2/apps`, { name: 'term' })).body;
    const fn = (await json(`${fnts.url}/v2/fns`, { app_id: app.id, name: 'slow', image: probe })).body;
    expect((await json(`${fnts.url}/invoke/${fn.id}`, {})).status).toBe(200);
    const inFlight = json(`${fnts.url}/invoke/${fn.id}`, { title: 'in flight', sleep: 1000 });
    expect(await eventually(() => fnShowsTitle(fn.id, 'in flight'), 5000, 20)).toBe(true);
    const exit = fnts.stop('SIGTERM');
    const answer = await inFlight;
    expect(answer.status).toBe(200);
    expect(answer.body.body).toEqual({ title: 'in flight', sleep: 1000 });
    expect(await exit).toBe(0);
    expect(await ownedBy(dbUrl)).toEqual([]);
  });

  it("never removes a live server's containers, and removes a dead one's however the data directory is spelled", async () => {
    const data = join(dir, 'shared');
    const spelled = `sqlite3://${data}/fn.db`;
    const respelled = `sqlite3://${data}/./fn.db`;
    const first = await startFnts({ FN_DB_URL: spelled });
    const app = (await json(`${first.url}/v2/apps`, { name: 'shared' })).body;
    const fn = (await json(`${first.url}/v2/fns`, { app_id: app.id, name: 'f', image: probe })).body;
    const before = await json(`${first.url}/invoke/${fn.id}`, {});
    expect(before.status).toBe(200);

    // A second server on the same data directory, spelled the same way.
    const second = await startFnts({ FN_DB_URL: spelled });
    const after = await json(`${first.url}/invoke/${fn.id}`, {});
    expect(after.status).toBe(200);
    expect(after.body.hostname).toBe(before.body.hostname);
    expect(second.output()).toMatch(/another fnts server .* uses this data directory/);
    expect(await second.stop(), second.output()).toBe(0);
    expect(await ownedBy(spelled)).toHaveLength(1);

    await first.stop('SIGKILL');
    const third = await startFnts({ FN_DB_URL: respelled });
    try {
      expect(await ownedBy(respelled)).toEqual([]);
    } finally {
      expect(await third.stop(), third.output()).toBe(0);
    }
  });

  it('removes containers left by an earlier instance that died', async () => {
    const dbUrl = `sqlite3://${join(dir, 'kill', 'fn.db')}`;
    const first = await startFnts({ FN_DB_URL: dbUrl });
    const app = (await json(`${first.url}/v2/apps`, { name: 'kill' })).body;
    const fn = (await json(`${first.url}/v2/fns`, { app_id: app.id, name: 'f', image: probe })).body;
    expect((await json(`${first.url}/invoke/${fn.id}`, {})).status).toBe(200);
    await first.stop('SIGKILL');
    expect(await ownedBy(dbUrl)).toHaveLength(1);

    const second = await startFnts({ FN_DB_URL: dbUrl });
    try {
      expect(await ownedBy(dbUrl)).toEqual([]);
      expect((await json(`${second.url}/invoke/${fn.id}`, {})).status).toBe(200);
    } finally {
      await second.stop();
    }
    expect(await eventually(async () => (await ownedBy(dbUrl)).length === 0, 3000, 50)).toBe(true);
  });
});
