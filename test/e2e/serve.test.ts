import { existsSync, mkdirSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { runFnts, startFnts } from '../support/process.js';
import { withTestToken } from '../support/auth.js';

const dir = mkdtempSync(join(tmpdir(), 'fnts-e2e-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

async function json(url: string, init?: RequestInit): Promise<{ status: number; body: any }> {
  const res = await fetch(url, { ...init, headers: withTestToken(url, (init?.headers ?? {}) as Record<string, string>) });
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

  it('stops cleanly when told to while it is starting: it comes up, then stops as on any SIGTERM, exit 0', async () => {
    const { proc, done } = runFnts(['serve'], { FN_PORT: '0', FN_LISTEN_HOST: '127.0.0.1', FNTS_GRPC_LISTEN_HOST: '127.0.0.1', FN_DB_URL: `sqlite3://${join(dir, 'early', 'fn.db')}` });
    // At its first line, long before it serves (a signal with no listener yet would kill it outright).
    proc.stdout!.once('data', () => proc.kill('SIGTERM'));
    const { code, output } = await done;
    expect(code, output).toBe(0);
    expect(output).toMatch(/fnts serving on :\d+[\s\S]*shutting down[\s\S]*fnts stopped/);
  });

  it('logs text lines for people with FN_LOG_FORMAT=text, from the first line to the last before it exits', async () => {
    const fnts = await startFnts({ FN_DB_URL: `sqlite3://${join(dir, 'text-log', 'fn.db')}`, FN_LOG_FORMAT: 'text' });
    expect((await json(`${fnts.url}/health`)).body).toEqual({ status: 'ok' });
    expect(await fnts.stop()).toBe(0);
    const lines = fnts.output().split('\n').filter(Boolean);
    const serving = lines.find((l) => l.includes('fnts serving on :'));
    // A time, the level, the message, then the fields: no JSON object, and no colours off a terminal.
    expect(serving).toMatch(/^\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3} [+-]\d{4}\] INFO: fnts serving on :\d+ \{.*"role":"full"/);
    expect(() => JSON.parse(serving!)).toThrow();
    expect(fnts.output()).not.toContain('\u001b[');
    expect(lines.at(-1), fnts.output()).toMatch(/INFO: fnts stopped$/);
  });

  it('refuses a bad setting at startup, naming the variable and what to use', async () => {
    const { done } = runFnts(['serve'], { FN_PORT: 'eighty' });
    const { code, output } = await done;
    expect(code).toBe(2);
    expect(output).toContain('FN_PORT=eighty is not a whole number; use a value from 0 to 65535');
    const format = await runFnts(['serve'], { FN_LOG_FORMAT: 'yaml' }).done;
    expect(format.code).toBe(2);
    expect(format.output).toContain('FN_LOG_FORMAT=yaml is not supported; use one of: json, text');
  });
});
