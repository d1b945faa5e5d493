import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { startApi, type TestApi } from '../support/api.js';

let api: TestApi;
let app: any;
beforeEach(async () => {
  api = await startApi();
  app = await api.createApp({ name: 'myapp', shape: 'GENERIC_X86_ARM' });
});
afterEach(async () => {
  await api.close();
});

const IMAGE = 'fnproject/hello:0.0.1';

async function fnCount(): Promise<number> {
  return (await api.call('GET', `/v2/fns?app_id=${app.id}&per_page=100`)).body.items.length;
}

describe('POST /v2/fns', () => {
  it("creates a fn with Fn's defaults, its app's shape and its invoke endpoint", async () => {
    const res = await api.call('POST', '/v2/fns', { app_id: app.id, name: 'hello', image: IMAGE });
    expect(res.status).toBe(200);
    expect(res.body).toEqual({
      id: expect.stringMatching(/^[0-9A-Z]{26}$/),
      name: 'hello',
      app_id: app.id,
      image: IMAGE,
      memory: 128,
      timeout: 30,
      idle_timeout: 30,
      format: 'http-stream',
      config: {},
      annotations: { 'fnproject.io/fn/invokeEndpoint': `http://fnts.test:8080/invoke/${res.body.id}` },
      shape: 'GENERIC_X86_ARM',
      created_at: expect.any(String),
      updated_at: res.body.created_at,
    });
    expect((await api.call('GET', `/v2/fns/${res.body.id}`)).body).toEqual(res.body);
  });

  it('shows no shape when its app has none, and ignores a shape of its own, as Fn does', async () => {
    const bare = await api.createApp({ name: 'bare' });
    const fn = await api.createFn({ app_id: bare.id, name: 'f', image: IMAGE, shape: 'GENERIC_ARM' });
    expect(fn).not.toHaveProperty('shape');
    expect((await api.call('GET', `/v2/fns/${fn.id}`)).body).not.toHaveProperty('shape');
    expect((await api.call('GET', `/v2/fns?app_id=${bare.id}`)).body.items[0]).not.toHaveProperty('shape');
    const inShapedApp = await api.createFn({ app_id: app.id, name: 'g', image: IMAGE, shape: 'GENERIC_ARM' });
    expect(inShapedApp.shape).toBe('GENERIC_X86_ARM');
  });

  it('treats 0 as "use the default" and keeps given values', async () => {
    const zero = await api.createFn({ app_id: app.id, name: 'zero', image: IMAGE, memory: 0, timeout: 0, idle_timeout: 0 });
    expect([zero.memory, zero.timeout, zero.idle_timeout]).toEqual([128, 30, 30]);
    const set = await api.createFn({ app_id: app.id, name: 'set', image: IMAGE, memory: 8192, timeout: 300, idle_timeout: 3600, config: { K: 'v' } });
    expect([set.memory, set.timeout, set.idle_timeout, set.config]).toEqual([8192, 300, 3600, { K: 'v' }]);
  });

  it('accepts every format Fn knows and shows it', async () => {
    for (const format of ['http-stream', 'http', 'json', 'cloudevent', 'default']) {
      expect((await api.createFn({ app_id: app.id, name: `f-${format}`, image: IMAGE, format })).format).toBe(format);
    }
  });

  it('builds endpoint annotations on FN_PUBLIC_LB_URL when it is set', async () => {
    await api.close();
    api = await startApi({ FN_PUBLIC_LB_URL: 'https://fn.example.com/' });
    app = await api.createApp({ name: 'pub' });
    const fn = await api.createFn({ app_id: app.id, name: 'f', image: IMAGE });
    expect(fn.annotations['fnproject.io/fn/invokeEndpoint']).toBe(`https://fn.example.com/invoke/${fn.id}`);
  });

  it.each([
    [{ name: 'f', image: IMAGE }, 'Missing AppID on Fn'],
    [{ image: IMAGE, app: 'x' }, 'Missing AppID on Fn'],
    [{ app_id: 'APP', image: IMAGE }, 'Missing Fn name'],
    [{ app_id: 'APP', name: 'f' }, 'Missing image on Fn'],
    [{ app_id: 'APP', name: 'f', image: '   ' }, 'Missing image on Fn'],
    [{ app_id: 'APP', name: 'f', image: IMAGE, id: 'x' }, 'ID cannot be provided for Fn creation'],
    [{ app_id: 'APP', name: 'has space', image: IMAGE }, 'name must be a valid string'],
    [{ app_id: 'APP', name: 'a/b', image: IMAGE }, 'name must be a valid string'],
    [{ app_id: 'APP', name: 'nön-ascii', image: IMAGE }, 'name must be a valid string'],
    [{ app_id: 'APP', name: 'f'.repeat(256), image: IMAGE }, 'Fn name must be 255 characters or less'],
    [{ app_id: 'APP', name: 'f', image: IMAGE, memory: 8193 }, 'memory value is out of range. It should be between 0 and 8192'],
    [{ app_id: 'APP', name: 'f', image: IMAGE, memory: 100000000000000 }, 'memory value is out of range. It should be between 0 and 8192'],
    [{ app_id: 'APP', name: 'f', image: IMAGE, timeout: 301 }, 'timeout value is out of range, must be between 0 and 300'],
    [{ app_id: 'APP', name: 'f', image: IMAGE, timeout: -1 }, 'timeout value is out of range, must be between 0 and 300'],
    [{ app_id: 'APP', name: 'f', image: IMAGE, idle_timeout: 3601 }, 'idle_timeout value is out of range, must be between 0 and 3600'],
    [{ app_id: 'APP', name: 'f', image: IMAGE, annotations: { ' ': 1 } }, 'Invalid annotation key, annotation keys must be non-empty ascii strings excluding whitespace'],
    [{ app_id: 'APP', name: 'f', image: IMAGE, config: { '': 'v' } }, "Invalid config key, config keys must be non-empty and must not contain '=' or NUL"],
    [{ app_id: 'APP', name: 'f', image: IMAGE, config: { K: '\u0000' } }, 'Invalid config value, config values must not contain NUL'],
    [{ app_id: 'APP', name: 'f', image: IMAGE, format: 'grpc' }, 'Invalid format on Fn'],
    // Image references by Docker's grammar (Fn stores these, and invoking one fails in the engine).
    [{ app_id: 'APP', name: 'f', image: '/' }, 'Invalid image on Fn: a name component is empty (a leading, trailing or doubled "/")'],
    [{ app_id: 'APP', name: 'f', image: 'team//fn:1' }, 'Invalid image on Fn: a name component is empty (a leading, trailing or doubled "/")'],
    [{ app_id: 'APP', name: 'f', image: 'Team/Fn' }, `Invalid image on Fn: the name component "Team" must be lower-case letters and digits, separated by '.', '_', '__' or '-'`],
    [{ app_id: 'APP', name: 'f', image: '../x' }, 'Invalid image on Fn: the registry ".." is not a host name with an optional port'],
    [{ app_id: 'APP', name: 'f', image: 'x/../y' }, `Invalid image on Fn: the name component ".." must be lower-case letters and digits, separated by '.', '_', '__' or '-'`],
    [{ app_id: 'APP', name: 'f', image: ' hello' }, `Invalid image on Fn: the name component " hello" must be lower-case letters and digits, separated by '.', '_', '__' or '-'`],
    [{ app_id: 'APP', name: 'f', image: 'hello:' }, `Invalid image on Fn: the tag "" must be 1 to 128 letters, digits, '_', '.' or '-', not starting with '.' or '-'`],
    [{ app_id: 'APP', name: 'f', image: 'hello@sha256:abc' }, 'Invalid image on Fn: the digest "sha256:abc" is not algorithm:hex (e.g. sha256: and 64 hex digits)'],
    // Config the engine could not pass to a container.
    [
      { app_id: 'APP', name: 'f', image: IMAGE, config: { BIG: 'x'.repeat(64 * 1024 + 1) } },
      'Invalid config, config keys must be at most 256 bytes, values at most 65536 bytes, and the whole config at most 262144 bytes',
    ],
    [
      { app_id: 'APP', name: 'f', image: IMAGE, config: { ['K'.repeat(257)]: 'v' } },
      'Invalid config, config keys must be at most 256 bytes, values at most 65536 bytes, and the whole config at most 262144 bytes',
    ],
    [
      { app_id: 'APP', name: 'f', image: IMAGE, config: Object.fromEntries(Array.from({ length: 5 }, (_, i) => [`K${i}`, 'x'.repeat(60_000)])) },
      'Invalid config, config keys must be at most 256 bytes, values at most 65536 bytes, and the whole config at most 262144 bytes',
    ],
    [{ app_id: 'APP', name: 'f', image: IMAGE, format: 5 }, 'Invalid JSON'],
    [{ app_id: 'APP', name: 'f', image: IMAGE, memory: -1 }, 'Invalid JSON'],
    [{ app_id: 'APP', name: 'f', image: IMAGE, memory: 1.5 }, 'Invalid JSON'],
    [{ app_id: 'APP', name: 'f', image: IMAGE, memory: '128' }, 'Invalid JSON'],
    [{ app_id: 'APP', name: 'f', image: IMAGE, timeout: 2 ** 31 }, 'Invalid JSON'],
  ])("answers 400 to %j with Fn's message", async (payload, message) => {
    const body = JSON.parse(JSON.stringify(payload).replaceAll('"APP"', JSON.stringify(app.id)));
    await api.expectError('POST', '/v2/fns', body, 400, message);
    expect(await fnCount()).toBe(0);
  });

  it('takes every form of image reference Docker does', async () => {
    const digest = `sha256:${'0123456789abcdef'.repeat(4)}`;
    for (const [i, image] of ['hello', 'fnproject/hello:0.0.1', 'localhost:5000/team/fn', 'registry.example.com:443/a/b/c:dev_1.0', `fnproject/hello@${digest}`, `r.io/x:1@${digest}`].entries()) {
      expect((await api.createFn({ app_id: app.id, name: `f${i}`, image })).image).toBe(image);
    }
  });

  it('refuses an update to an image Docker could not resolve, and keeps the fn as it was', async () => {
    const fn = await api.createFn({ app_id: app.id, name: 'f', image: IMAGE });
    await api.expectError('PUT', `/v2/fns/${fn.id}`, { image: '/' }, 400, 'Invalid image on Fn: a name component is empty (a leading, trailing or doubled "/")');
    expect((await api.call('GET', `/v2/fns/${fn.id}`)).body.image).toBe(IMAGE);
  });

  it('takes config up to the limits, and refuses an update that would pass them', async () => {
    const config = Object.fromEntries(Array.from({ length: 4 }, (_, i) => [`K${i}`, 'x'.repeat(64 * 1024 - 2)]));
    const fn = await api.createFn({ app_id: app.id, name: 'f', image: IMAGE, config });
    expect(Object.keys(fn.config)).toHaveLength(4);
    await api.expectError(
      'PUT',
      `/v2/fns/${fn.id}`,
      { config: { MORE: 'x'.repeat(100) } },
      400,
      'Invalid config, config keys must be at most 256 bytes, values at most 65536 bytes, and the whole config at most 262144 bytes',
    );
  });

  it('answers 404 App not found for an unknown app', async () => {
    await api.expectError('POST', '/v2/fns', { app_id: 'nope', name: 'f', image: IMAGE }, 404, 'App not found');
  });

  it('answers 409 to a second fn of the same name in the app, but allows it in another app', async () => {
    await api.createFn({ app_id: app.id, name: 'f', image: IMAGE });
    await api.expectError('POST', '/v2/fns', { app_id: app.id, name: 'f', image: 'other:1' }, 409, 'Fn with specified name already exists');
    const other = await api.createApp({ name: 'other' });
    await api.createFn({ app_id: other.id, name: 'f', image: IMAGE });
    expect(await fnCount()).toBe(1);
  });

  it('does not store the computed invoke endpoint a client sends back', async () => {
    const fn = await api.createFn({ app_id: app.id, name: 'f', image: IMAGE, annotations: { 'fnproject.io/fn/invokeEndpoint': 'http://elsewhere/x', mine: 1 } });
    expect(fn.annotations).toEqual({ mine: 1, 'fnproject.io/fn/invokeEndpoint': `http://fnts.test:8080/invoke/${fn.id}` });
  });
});

describe('GET /v2/fns', () => {
  it('needs app_id', async () => {
    await api.expectError('GET', '/v2/fns', undefined, 400, 'Missing AppID on Fn');
  });

  it("lists the app's fns by name with paging, a name filter and endpoints", async () => {
    for (const n of ['c', 'a', 'b']) await api.createFn({ app_id: app.id, name: n, image: IMAGE });
    const other = await api.createApp({ name: 'other' });
    await api.createFn({ app_id: other.id, name: 'zz', image: IMAGE });

    const page1 = await api.call('GET', `/v2/fns?app_id=${app.id}&per_page=2`);
    expect(page1.body.items.map((f: any) => f.name)).toEqual(['a', 'b']);
    expect(page1.body.items[0].annotations['fnproject.io/fn/invokeEndpoint']).toMatch(/\/invoke\/[0-9A-Z]{26}$/);
    const page2 = await api.call('GET', `/v2/fns?app_id=${app.id}&per_page=2&cursor=${page1.body.next_cursor}`);
    expect(page2.body).toEqual({ items: [expect.objectContaining({ name: 'c' })] });
    expect((await api.call('GET', `/v2/fns?app_id=${app.id}&name=b`)).body.items.map((f: any) => f.name)).toEqual(['b']);
    expect((await api.call('GET', '/v2/fns?app_id=unknown')).body).toEqual({ items: [] });
  });
});

describe('PUT /v2/fns/{fnID}', () => {
  it('changes what is given, keeps what is not, merges config', async () => {
    const fn = await api.createFn({ app_id: app.id, name: 'f', image: IMAGE, memory: 256, config: { A: '1', B: '2' } });
    const res = await api.call('PUT', `/v2/fns/${fn.id}`, { image: 'fnproject/hello:0.0.2', timeout: 60, format: 'json', config: { A: '', C: '3' } });
    expect(res.status).toBe(200);
    expect(res.body).toMatchObject({ image: 'fnproject/hello:0.0.2', memory: 256, timeout: 60, idle_timeout: 30, format: 'json', config: { B: '2', C: '3' } });
    expect(res.body.annotations['fnproject.io/fn/invokeEndpoint']).toBe(`http://fnts.test:8080/invoke/${fn.id}`);
    expect((await api.call('GET', `/v2/fns/${fn.id}`)).body).toEqual(res.body);
  });

  it('accepts the listing entry echoed back by the fn CLI, endpoint annotation and zero timestamps included', async () => {
    const fn = await api.createFn({ app_id: app.id, name: 'f', image: IMAGE });
    const res = await api.call('PUT', `/v2/fns/${fn.id}`, { ...fn, memory: 512, created_at: '0001-01-01T00:00:00.000Z', updated_at: null });
    expect(res.status).toBe(200);
    expect(res.body.memory).toBe(512);
    const stored = await api.datastore.getFnById(fn.id);
    expect(stored.annotations).toEqual({});
  });

  it("answers Fn's errors and changes nothing", async () => {
    const fn = await api.createFn({ app_id: app.id, name: 'f', image: IMAGE });
    await api.expectError('PUT', `/v2/fns/${fn.id}`, { memory: 9000 }, 400, 'memory value is out of range. It should be between 0 and 8192');
    await api.expectError('PUT', `/v2/fns/${fn.id}`, { timeout: -5 }, 400, 'timeout value is out of range, must be between 0 and 300');
    await api.expectError('PUT', `/v2/fns/${fn.id}`, { format: 'xml' }, 400, 'Invalid format on Fn');
    await api.expectError('PUT', `/v2/fns/${fn.id}`, { config: { K: 'v\u0000' } }, 400, 'Invalid config value, config values must not contain NUL');
    await api.expectError('PUT', `/v2/fns/${fn.id}`, { id: 'other' }, 400, 'Fn ID in path does not match that in body');
    await api.expectError('PUT', `/v2/fns/${fn.id}`, { app_id: 'elsewhere' }, 409, 'Could not update - app_id is immutable');
    await api.expectError('PUT', '/v2/fns/nope', { memory: 256 }, 404, 'Fn not found');
    expect((await api.call('GET', `/v2/fns/${fn.id}`)).body).toEqual(fn);
  });

  // Fn 0.3.753 answers 200 and keeps the name (its Fn.Update copies only the
  // runtime fields), whether or not the new name is taken.
  it('ignores a new name, as Fn does, and still applies the rest', async () => {
    const fn = await api.createFn({ app_id: app.id, name: 'f', image: IMAGE });
    await api.createFn({ app_id: app.id, name: 'taken', image: IMAGE });
    const renamed = await api.call('PUT', `/v2/fns/${fn.id}`, { name: 'renamed' });
    expect(renamed.status).toBe(200);
    expect(renamed.body).toEqual(fn);
    expect((await api.call('PUT', `/v2/fns/${fn.id}`, { name: 'taken' })).body).toEqual(fn);
    const updated = await api.call('PUT', `/v2/fns/${fn.id}`, { name: 'renamed', memory: 256 });
    expect(updated.status).toBe(200);
    expect(updated.body).toMatchObject({ name: 'f', memory: 256 });
    expect((await api.call('GET', `/v2/fns?app_id=${app.id}`)).body.items.map((f: any) => f.name)).toEqual(['f', 'taken']);
  });
});

describe('DELETE /v2/fns/{fnID}', () => {
  it("answers 204, removes the fn's triggers, and 404 after", async () => {
    const fn = await api.createFn({ app_id: app.id, name: 'f', image: IMAGE });
    const t = await api.createTrigger({ app_id: app.id, fn_id: fn.id, name: 't', type: 'http', source: '/t' });
    const res = await api.call('DELETE', `/v2/fns/${fn.id}`);
    expect([res.status, res.raw]).toEqual([204, '']);
    await api.expectError('GET', `/v2/fns/${fn.id}`, undefined, 404, 'Fn not found');
    await api.expectError('DELETE', `/v2/fns/${fn.id}`, undefined, 404, 'Fn not found');
    await api.expectError('GET', `/v2/triggers/${t.id}`, undefined, 404, 'Trigger not found');
    expect((await api.call('GET', `/v2/apps/${app.id}`)).status).toBe(200);
  });
});
