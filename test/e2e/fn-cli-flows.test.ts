/**
 * fn-cli.test.ts drives fnts with the official `fn` CLI from ../shared/bin,
 * which a user's clone does not have; these tests replay, over real HTTP
 * against the real binary, the request sequences the CLI (fnproject/cli with
 * fn_go's v2 client) sends for each command, with its headers and body
 * shapes: lookups by `?name=`, whole-object PUTs echoing read-only fields and
 * Go zero timestamps, paging until next_cursor is absent, 204 deletes.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startFnts, type FntsProcess } from '../support/process.js';
import { bearer } from '../support/auth.js';

const ZERO = '0001-01-01T00:00:00.000Z';
let fnts: FntsProcess;
let dir: string;

beforeAll(async () => {
  dir = mkdtempSync(join(tmpdir(), 'fnts-cli-'));
  fnts = await startFnts({ FN_DB_URL: `sqlite3://${join(dir, 'fn.db')}` });
});
afterAll(async () => {
  await fnts.stop();
  rmSync(dir, { recursive: true, force: true });
});

/** What fn_go sends: Accept always, Content-Type only with a body, Go's User-Agent. */
async function fnGo(method: string, path: string, body?: unknown): Promise<{ status: number; body: any; contentType: string | null }> {
  const headers: Record<string, string> = { accept: 'application/json', 'user-agent': 'Go-http-client/1.1', ...bearer() };
  if (body !== undefined) headers['content-type'] = 'application/json';
  const res = await fetch(`${fnts.url}/v2${path}`, { method, headers, ...(body === undefined ? {} : { body: JSON.stringify(body) }) });
  const text = await res.text();
  return { status: res.status, body: text ? JSON.parse(text) : undefined, contentType: res.headers.get('content-type') };
}

/** The CLI's GetAppByName: list with ?name= and take items[0]. */
async function appByName(name: string): Promise<any> {
  const res = await fnGo('GET', `/apps?name=${encodeURIComponent(name)}`);
  expect(res.status).toBe(200);
  return res.body.items[0];
}

async function fnByName(appId: string, name: string): Promise<any> {
  const res = await fnGo('GET', `/fns?app_id=${appId}&name=${encodeURIComponent(name)}`);
  expect(res.status).toBe(200);
  return res.body.items.find((f: any) => f.name === name);
}

async function triggerByName(appId: string, fnId: string, name: string): Promise<any> {
  const res = await fnGo('GET', `/triggers?app_id=${appId}&fn_id=${fnId}&name=${encodeURIComponent(name)}`);
  return res.body.items[0];
}

/** The CLI pages without per_page until next_cursor is empty. */
async function listAll(path: string): Promise<any[]> {
  const items: any[] = [];
  let cursor = '';
  for (let i = 0; i < 100; i++) {
    const sep = path.includes('?') ? '&' : '?';
    const res = await fnGo('GET', cursor ? `${path}${sep}cursor=${cursor}` : path);
    expect(res.status).toBe(200);
    items.push(...res.body.items);
    cursor = res.body.next_cursor ?? '';
    if (!cursor) return items;
  }
  throw new Error('paging never ended');
}

describe('fn CLI request flows', () => {
  it('fn create app / list apps / inspect app / config app / unset config app', async () => {
    // fn create app cliapp --config LEVEL=debug --annotation team="\"payments\""
    const created = await fnGo('POST', '/apps', { name: 'cliapp', config: { LEVEL: 'debug' }, annotations: { team: 'payments' }, created_at: ZERO, updated_at: ZERO });
    expect(created.status).toBe(200);
    expect(created.contentType).toMatch(/^application\/json/);
    expect(created.body).toMatchObject({ id: expect.any(String), name: 'cliapp' });

    // fn create app cliapp (again): the CLI prints the message field
    const dup = await fnGo('POST', '/apps', { name: 'cliapp', created_at: ZERO, updated_at: ZERO });
    expect(dup).toMatchObject({ status: 409, body: { message: 'App already exists' } });

    for (let i = 0; i < 35; i++) await fnGo('POST', '/apps', { name: `more-${String(i).padStart(2, '0')}`, created_at: ZERO, updated_at: ZERO });
    const all = await listAll('/apps');
    expect(all).toHaveLength(36);
    expect(new Set(all.map((a) => a.name)).size).toBe(36);

    const app = await appByName('cliapp');
    expect(app).toEqual(created.body);

    // fn config app cliapp DB_URL postgres://db: whole object back, config holds only the new key
    const configured = await fnGo('PUT', `/apps/${app.id}`, { ...app, config: { DB_URL: 'postgres://db' } });
    expect(configured.status).toBe(200);
    expect(configured.body.config).toEqual({ LEVEL: 'debug', DB_URL: 'postgres://db' });

    // fn unset config app cliapp LEVEL: the full config with LEVEL set to ""
    const current = await appByName('cliapp');
    const unset = await fnGo('PUT', `/apps/${app.id}`, { ...current, config: { ...current.config, LEVEL: '' } });
    expect(unset.body.config).toEqual({ DB_URL: 'postgres://db' });

    // fn update app cliapp --annotation owner="\"me\""
    const annotated = await fnGo('PUT', `/apps/${app.id}`, { ...(await appByName('cliapp')), annotations: { owner: 'me' } });
    expect(annotated.body.annotations).toEqual({ team: 'payments', owner: 'me' });
  });

  it('fn create function / list functions / inspect --endpoint / update function / deploy-style update', async () => {
    const app = await appByName('cliapp');
    const created = await fnGo('POST', '/fns', {
      name: 'hello',
      app_id: app.id,
      image: 'fnproject/hello:0.0.1',
      memory: 256,
      timeout: 0,
      idle_timeout: 0,
      created_at: ZERO,
      updated_at: ZERO,
    });
    expect(created.status).toBe(200);
    expect(created.body).toMatchObject({ name: 'hello', image: 'fnproject/hello:0.0.1', memory: 256, timeout: 30, idle_timeout: 30 });

    const listed = await listAll(`/fns?app_id=${app.id}`);
    expect(listed.map((f) => f.name)).toEqual(['hello']);

    // fn inspect function cliapp hello --endpoint; fn invoke uses the same annotation
    const fn = await fnByName(app.id, 'hello');
    expect(fn.annotations['fnproject.io/fn/invokeEndpoint']).toBe(`${fnts.url}/invoke/${fn.id}`);

    // fn update function cliapp hello --memory 512: the listing entry sent back whole
    const updated = await fnGo('PUT', `/fns/${fn.id}`, { ...fn, memory: 512 });
    expect(updated.status).toBe(200);
    expect(updated.body.memory).toBe(512);
    expect(updated.body.image).toBe('fnproject/hello:0.0.1');

    // fn deploy on an existing fn: PUT with id and image, without name or app_id
    const deployed = await fnGo('PUT', `/fns/${fn.id}`, { id: fn.id, image: 'fnproject/hello:0.0.2', memory: 512, created_at: ZERO, updated_at: ZERO });
    expect(deployed.status).toBe(200);
    expect(deployed.body).toMatchObject({ name: 'hello', image: 'fnproject/hello:0.0.2' });

    // fn create function with a bad memory value: the CLI prints the message
    const bad = await fnGo('POST', '/fns', { name: 'big', app_id: app.id, image: 'x:1', memory: 100000, created_at: ZERO, updated_at: ZERO });
    expect(bad).toMatchObject({ status: 400, body: { message: 'memory value is out of range. It should be between 0 and 8192' } });
  });

  it('fn create trigger / list triggers / inspect trigger / update trigger / delete trigger', async () => {
    const app = await appByName('cliapp');
    const fn = await fnByName(app.id, 'hello');
    const created = await fnGo('POST', '/triggers', { app_id: app.id, fn_id: fn.id, name: 'hello-trigger', type: 'http', source: '/hello', created_at: ZERO, updated_at: ZERO });
    expect(created.status).toBe(200);

    // fn list triggers cliapp (no fn): list by app, then GET each trigger's fn
    const triggers = await listAll(`/triggers?app_id=${app.id}`);
    expect(triggers.map((t) => [t.name, t.type, t.source, t.annotations['fnproject.io/trigger/httpEndpoint']])).toEqual([['hello-trigger', 'http', '/hello', `${fnts.url}/t/cliapp/hello`]]);
    expect((await fnGo('GET', `/fns/${triggers[0].fn_id}`)).body.name).toBe('hello');

    const t = await triggerByName(app.id, fn.id, 'hello-trigger');
    const updated = await fnGo('PUT', `/triggers/${t.id}`, { ...t, annotations: { ...t.annotations, note: 'x' } });
    expect(updated.status).toBe(200);
    expect(updated.body.annotations.note).toBe('x');

    // fn deploy re-applying the trigger from func.yaml
    const redeployed = await fnGo('PUT', `/triggers/${t.id}`, { id: t.id, app_id: app.id, fn_id: fn.id, name: 'hello-trigger', source: '/hello', type: 'http' });
    expect(redeployed.status).toBe(200);

    const del = await fnGo('DELETE', `/triggers/${t.id}`);
    expect(del.status).toBe(204);
    expect(await triggerByName(app.id, fn.id, 'hello-trigger')).toBeUndefined();
  });

  it('fn delete app --recursive: triggers, then fns, then the app, each 204', async () => {
    const app = await appByName('cliapp');
    const fn = await fnByName(app.id, 'hello');
    await fnGo('POST', '/triggers', { app_id: app.id, fn_id: fn.id, name: 't2', type: 'http', source: '/t2', created_at: ZERO, updated_at: ZERO });
    for (const f of await listAll(`/fns?app_id=${app.id}`)) {
      for (const t of await listAll(`/triggers?app_id=${app.id}&fn_id=${f.id}`)) expect((await fnGo('DELETE', `/triggers/${t.id}`)).status).toBe(204);
      expect((await fnGo('DELETE', `/fns/${f.id}`)).status).toBe(204);
    }
    expect((await fnGo('DELETE', `/apps/${app.id}`)).status).toBe(204);
    expect(await appByName('cliapp')).toBeUndefined();
    // fn delete app on a missing app: 404 with Fn's message
    expect(await fnGo('DELETE', `/apps/${app.id}`)).toMatchObject({ status: 404, body: { message: 'App not found' } });
  });
});
