import { existsSync, mkdirSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { runFnts, startFnts } from '../support/process.js';

const dir = mkdtempSync(join(tmpdir(), 'fnts-e2e-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

async function json(url: string, init?: RequestInit): Promise<{ status: number; body: any }> {
  const res = await fetch(url, init);
  const text = await res.text();
  return { status: res.status, body: text ? JSON.parse(text) : undefined };
}

const post = (url: string, body: unknown) => json(url, { method: 'POST', body: JSON.stringify(body), headers: { 'content-type': 'application/json' } });

describe('fnts serve', () => {
  it('keeps its data in the SQLite file across a graceful restart', async () => {
    const env = { FN_DB_URL: `sqlite3://${join(dir, 'restart', 'fn.db')}` };
    const first = await startFnts(env);
    const app = (await post(`${first.url}/v2/apps`, { name: 'durable', config: { K: 'v' } })).body;
    const fn = (await post(`${first.url}/v2/fns`, { app_id: app.id, name: 'f', image: 'fnproject/hello:0.0.1' })).body;
    const trigger = (await post(`${first.url}/v2/triggers`, { app_id: app.id, fn_id: fn.id, name: 't', type: 'http', source: '/f' })).body;
    expect(await first.stop('SIGTERM')).toBe(0);

    const second = await startFnts(env);
    try {
      expect((await json(`${second.url}/v2/apps/${app.id}`)).body).toEqual(app);
      const gotFn = (await json(`${second.url}/v2/fns/${fn.id}`)).body;
      expect(gotFn).toEqual({ ...fn, annotations: { 'fnproject.io/fn/invokeEndpoint': `${second.url}/invoke/${fn.id}` } });
      expect((await json(`${second.url}/v2/triggers/${trigger.id}`)).body.source).toBe('/f');
    } finally {
      expect(await second.stop('SIGINT')).toBe(0);
    }
  });

  it('keeps its data in ./data/fn.db under its working directory by default', async () => {
    const cwd = join(dir, 'default-db');
    mkdirSync(cwd);
    const fnts = await startFnts({}, { cwd });
    expect((await post(`${fnts.url}/v2/apps`, { name: 'here' })).status).toBe(200);
    expect(await fnts.stop()).toBe(0);
    expect(existsSync(join(cwd, 'data', 'fn.db'))).toBe(true);
  });

  it('refuses a bad setting at startup, naming the variable and what to use', async () => {
    const { done } = runFnts(['serve'], { FN_PORT: 'eighty' });
    const { code, output } = await done;
    expect(code).toBe(2);
    expect(output).toContain('FN_PORT=eighty is not a whole number; use a value from 0 to 65535');
  });
});
