import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { OWNER_LABEL } from '../../src/agent/index.js';
import { compileConfig } from '../../src/config/index.js';
import { docker } from '../support/images.js';
import { probeImage } from '../support/functions.js';
import { startFnts } from '../support/process.js';
import { eventually, startTestServer, type TestServer } from '../support/server.js';

let probe: string;
const dir = mkdtempSync(join(tmpdir(), 'fnts-life-'));
beforeAll(async () => {
  probe = await probeImage();
});
afterAll(() => rmSync(dir, { recursive: true, force: true }));

async function ownedBy(dbUrl: string) {
  const instance = compileConfig({ FN_DB_URL: dbUrl }).agent.owner;
  return docker().listContainers({ all: true, filters: { label: [`${OWNER_LABEL}=${instance}`] } });
}

async function json(url: string, body: unknown): Promise<any> {
  const res = await fetch(url, { method: 'POST', body: JSON.stringify(body), headers: { 'content-type': 'application/json' } });
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

  it('evicts another function\'s idle container when a call waits for its memory', async () => {
    const app = await s.app();
    const a = await s.fn(app, probe, { memory: 200 });
    const b = await s.fn(app, probe, { memory: 200 });
    const first = await s.invoke(a.id, {});
    expect(first.status).toBe(200);
    expect((await s.containers()).map((c) => c.Labels['fnts.fn_id'])).toEqual([a.id]);
    const second = await s.invoke(b.id, {});
    expect(second.status).toBe(200);
    const left = await s.containers();
    expect(left.map((c) => c.Labels['fnts.fn_id'])).toEqual([b.id]);
    expect(s.server.agent!.snapshot().containers).toBe(1);
  });
});

describe('the server process', () => {
  it('finishes in-flight calls on SIGTERM, then removes every container it started', async () => {
    const dbUrl = `sqlite3://${join(dir, 'term', 'fn.db')}`;
    const fnts = await startFnts({ FN_DB_URL: dbUrl });
    const app = (await json(`${fnts.url}/v2/apps`, { name: 'term' })).body;
    const fn = (await json(`${fnts.url}/v2/fns`, { app_id: app.id, name: 'slow', image: probe })).body;
    expect((await json(`${fnts.url}/invoke/${fn.id}`, {})).status).toBe(200);
    const inFlight = json(`${fnts.url}/invoke/${fn.id}`, { sleep: 1500 });
    await new Promise((r) => setTimeout(r, 400));
    const exit = fnts.stop('SIGTERM');
    const answer = await inFlight;
    expect(answer.status).toBe(200);
    expect(answer.body.body).toEqual({ sleep: 1500 });
    expect(await exit).toBe(0);
    expect(await ownedBy(dbUrl)).toEqual([]);
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
    expect(await eventually(async () => (await ownedBy(dbUrl)).length === 0, 3000)).toBe(true);
  });
});
