import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { startApi, type TestApi } from '../support/api.js';

let api: TestApi;
let app: any;
let fn: any;
beforeEach(async () => {
  api = await startApi();
  app = await api.createApp({ name: 'myapp' });
  fn = await api.createFn({ app_id: app.id, name: 'hello', image: 'fnproject/hello:0.0.1' });
});
afterEach(async () => {
  await api.close();
});

const trig = (extra: Record<string, unknown> = {}) => ({ app_id: app.id, fn_id: fn.id, name: 't', type: 'http', source: '/hello', ...extra });

async function triggerCount(): Promise<number> {
  return (await api.call('GET', `/v2/triggers?app_id=${app.id}`)).body.items.length;
}

describe('POST /v2/triggers', () => {
  it('creates an http trigger with its endpoint', async () => {
    const res = await api.call('POST', '/v2/triggers', trig({ annotations: { team: 'a' } }));
    expect(res.status).toBe(200);
    expect(res.body).toEqual({
      id: expect.stringMatching(/^[0-9A-Z]{26}$/),
      name: 't',
      app_id: app.id,
      fn_id: fn.id,
      type: 'http',
      source: '/hello',
      annotations: { team: 'a', 'fnproject.io/trigger/httpEndpoint': 'http://fnts.test:8080/t/myapp/hello' },
      created_at: expect.any(String),
      updated_at: res.body.created_at,
    });
    expect((await api.call('GET', `/v2/triggers/${res.body.id}`)).body).toEqual(res.body);
  });

  it('accepts the zero timestamps Go clients send on create', async () => {
    const res = await api.call('POST', '/v2/triggers', trig({ created_at: '0001-01-01T00:00:00.000Z', updated_at: '0001-01-01T00:00:00Z' }));
    expect(res.status).toBe(200);
    expect(res.body.created_at).not.toMatch(/^0001/);
  });

  it.each([
    [{ app_id: '' }, 'Missing App ID on Trigger'],
    [{ name: '' }, 'Missing name on Trigger'],
    [{ name: 'a b' }, 'Invalid name for Trigger'],
    [{ name: '../t' }, 'Invalid name for Trigger'],
    [{ name: 't'.repeat(256) }, 'Trigger name must be 255 characters or less'],
    [{ fn_id: '' }, 'Missing Fn ID on Trigger'],
    [{ type: 'cron' }, 'Trigger Type Not Supported'],
    [{ type: undefined }, 'Trigger Type Not Supported'],
    [{ source: '' }, 'Missing Trigger Source'],
    [{ source: 'hello' }, "Missing Trigger Source Prefix '/'"],
    [{ source: '/a/../b' }, 'Invalid Trigger Source'],
    [{ source: '/a//b' }, 'Invalid Trigger Source'],
    [{ source: '/a?x=1' }, 'Invalid Trigger Source'],
    [{ source: '/a b' }, 'Invalid Trigger Source'],
    [{ source: '/a\\b' }, 'Invalid Trigger Source'],
    // Escapes are decoded first, as the trigger route decodes the request path before matching.
    [{ source: '/%2e%2e/x' }, 'Invalid Trigger Source'],
    [{ source: '/a/%2E/b' }, 'Invalid Trigger Source'],
    [{ source: '/a%2F%2Fb' }, 'Invalid Trigger Source'],
    [{ source: '/a%20b' }, 'Invalid Trigger Source'],
    [{ source: '/a%3Fx=1' }, 'Invalid Trigger Source'],
    [{ source: '/a%00' }, 'Invalid Trigger Source'],
    [{ source: '/100%' }, 'Invalid Trigger Source'],
    [{ source: '/100%25' }, 'Invalid Trigger Source'],
    [{ id: 'x' }, 'ID cannot be provided for Trigger creation'],
    [{ created_at: '2020-01-01T00:00:00Z' }, 'Trigger Created At Provided for Create'],
    [{ updated_at: '2020-01-01T00:00:00Z' }, 'Trigger ID Provided for Create'],
    [{ created_at: 'yesterday' }, 'Invalid JSON'],
    [{ annotations: { k: null } }, 'Invalid annotation value, annotation values may only be non-empty strings, numbers, objects, or arrays'],
  ])("answers 400 to %j with Fn's message", async (extra, message) => {
    await api.expectError('POST', '/v2/triggers', trig(extra), 400, message);
    expect(await triggerCount()).toBe(0);
  });

  it('keeps an escaped source decoded, the form the trigger route matches, and shows its endpoint escaped', async () => {
    const t = await api.createTrigger(trig({ source: '/caf%C3%A9/%7Eme' }));
    expect(t.source).toBe('/café/~me');
    expect(t.annotations['fnproject.io/trigger/httpEndpoint']).toBe('http://fnts.test:8080/t/myapp/caf%C3%A9/~me');
    expect((await api.datastore.getTriggerById(t.id)).source).toBe('/café/~me');
    // One route, two spellings.
    await api.expectError('POST', '/v2/triggers', trig({ name: 'other', source: '/café/~me' }), 409, 'Trigger with the same type and source exists on this app');
    // The CLI sends the source back as shown.
    expect((await api.call('PUT', `/v2/triggers/${t.id}`, { ...t })).status).toBe(200);
    expect((await api.call('GET', `/v2/triggers/${t.id}`)).body.source).toBe('/café/~me');
  });

  it('answers 404 for an unknown app or fn, and 400 for a fn of another app', async () => {
    await api.expectError('POST', '/v2/triggers', trig({ app_id: 'nope' }), 404, 'App not found');
    await api.expectError('POST', '/v2/triggers', trig({ fn_id: 'nope' }), 404, 'Fn not found');
    const other = await api.createApp({ name: 'other' });
    const otherFn = await api.createFn({ app_id: other.id, name: 'x', image: 'i:1' });
    await api.expectError('POST', '/v2/triggers', trig({ fn_id: otherFn.id }), 400, 'Invalid Fn ID - not owned by specified app');
    expect(await triggerCount()).toBe(0);
  });

  it('answers 409 to a taken name on the fn or a taken source in the app', async () => {
    await api.createTrigger(trig());
    await api.expectError('POST', '/v2/triggers', trig({ source: '/other' }), 409, 'Trigger already exists');
    await api.expectError('POST', '/v2/triggers', trig({ name: 'other' }), 409, 'Trigger with the same type and source exists on this app');
    const fn2 = await api.createFn({ app_id: app.id, name: 'fn2', image: 'i:1' });
    await api.createTrigger(trig({ fn_id: fn2.id, source: '/fn2' }));
    expect(await triggerCount()).toBe(2);
  });
});

describe('GET /v2/triggers', () => {
  it('needs app_id', async () => {
    await api.expectError('GET', '/v2/triggers', undefined, 400, 'Missing App ID on Trigger');
  });

  it('lists by name, filters by fn and name, and pages', async () => {
    const fn2 = await api.createFn({ app_id: app.id, name: 'fn2', image: 'i:1' });
    await api.createTrigger(trig({ name: 'b', source: '/b' }));
    await api.createTrigger(trig({ name: 'a', source: '/a' }));
    await api.createTrigger(trig({ name: 'a', source: '/a2', fn_id: fn2.id }));

    const all = await api.call('GET', `/v2/triggers?app_id=${app.id}`);
    expect(all.body.items.map((t: any) => [t.name, t.source])).toEqual([
      ['a', expect.any(String)],
      ['a', expect.any(String)],
      ['b', '/b'],
    ]);
    expect(all.body.items[2].annotations['fnproject.io/trigger/httpEndpoint']).toBe('http://fnts.test:8080/t/myapp/b');
    expect((await api.call('GET', `/v2/triggers?app_id=${app.id}&fn_id=${fn2.id}`)).body.items.map((t: any) => t.source)).toEqual(['/a2']);
    expect((await api.call('GET', `/v2/triggers?app_id=${app.id}&name=b`)).body.items.map((t: any) => t.source)).toEqual(['/b']);

    const p1 = await api.call('GET', `/v2/triggers?app_id=${app.id}&per_page=1`);
    const p2 = await api.call('GET', `/v2/triggers?app_id=${app.id}&per_page=1&cursor=${p1.body.next_cursor}`);
    const p3 = await api.call('GET', `/v2/triggers?app_id=${app.id}&per_page=1&cursor=${p2.body.next_cursor}`);
    expect([p1, p2, p3].map((p) => p.body.items[0].source).sort()).toEqual(['/a', '/a2', '/b']);
    expect(p3.body.next_cursor).toBeUndefined();
  });
});

describe('PUT /v2/triggers/{triggerID}', () => {
  it('changes source, name and annotations, and checks conflicts', async () => {
    const t = await api.createTrigger(trig());
    await api.createTrigger(trig({ name: 'other', source: '/taken' }));
    const res = await api.call('PUT', `/v2/triggers/${t.id}`, { source: '/moved', annotations: { k: 'v' } });
    expect(res.status).toBe(200);
    expect(res.body).toMatchObject({ name: 't', source: '/moved', annotations: { k: 'v', 'fnproject.io/trigger/httpEndpoint': 'http://fnts.test:8080/t/myapp/moved' } });
    await api.expectError('PUT', `/v2/triggers/${t.id}`, { source: '/taken' }, 409, 'Trigger with the same type and source exists on this app');
    await api.expectError('PUT', `/v2/triggers/${t.id}`, { name: 'other' }, 409, 'Trigger already exists');
    await api.expectError('PUT', `/v2/triggers/${t.id}`, { source: 'nope' }, 400, "Missing Trigger Source Prefix '/'");
    await api.expectError('PUT', `/v2/triggers/${t.id}`, { source: '/%2e%2e/x' }, 400, 'Invalid Trigger Source');
    await api.expectError('PUT', `/v2/triggers/${t.id}`, { id: 'x' }, 400, 'ID in path does not match ID in body');
    await api.expectError('PUT', '/v2/triggers/missing', { source: '/x' }, 404, 'Trigger not found');
    expect((await api.call('GET', `/v2/triggers/${t.id}`)).body.source).toBe('/moved');
  });

  it('accepts the listing entry echoed back by the fn CLI', async () => {
    const t = await api.createTrigger(trig());
    const res = await api.call('PUT', `/v2/triggers/${t.id}`, { ...t, annotations: { ...t.annotations, added: true } });
    expect(res.status).toBe(200);
    expect((await api.datastore.getTriggerById(t.id)).annotations).toEqual({ added: true });
  });
});

describe('DELETE /v2/triggers/{triggerID}', () => {
  it('answers 204 then 404', async () => {
    const t = await api.createTrigger(trig());
    const res = await api.call('DELETE', `/v2/triggers/${t.id}`);
    expect([res.status, res.raw]).toEqual([204, '']);
    await api.expectError('DELETE', `/v2/triggers/${t.id}`, undefined, 404, 'Trigger not found');
    expect((await api.call('GET', `/v2/fns/${fn.id}`)).status).toBe(200);
  });
});

describe('GET /v2/runner/apps/{appID}/triggerBySource/http/{source}', () => {
  it("finds a trigger by source in the form Fn's LB asks for it (the source's own slash after http/), and in the short form", async () => {
    const t = (await api.call('POST', '/v2/triggers', trig({ source: '/hello/there' }))).body;
    const fnLb = await api.call('GET', `/v2/runner/apps/${app.id}/triggerBySource/http//hello/there`);
    expect(fnLb.status).toBe(200);
    expect(fnLb.body).toMatchObject({ id: t.id, fn_id: fn.id, source: '/hello/there' });
    expect((await api.call('GET', `/v2/runner/apps/${app.id}/triggerBySource/http/hello/there`)).body.id).toBe(t.id);
    await api.expectError('GET', `/v2/runner/apps/${app.id}/triggerBySource/http//hello`, undefined, 404, 'Trigger not found');
  });
});
