import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { startApi, type TestApi } from '../support/api.js';

let api: TestApi;
beforeEach(async () => {
  api = await startApi();
});
afterEach(async () => {
  await api.close();
});

const ISO_MS = /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$/;

async function appNames(): Promise<string[]> {
  return (await api.call('GET', '/v2/apps?per_page=100')).body.items.map((a: any) => a.name);
}

describe('POST /v2/apps', () => {
  it('creates an app and answers 200 with the whole record', async () => {
    const res = await api.call('POST', '/v2/apps', {
      name: 'myapp',
      config: { DB_URL: 'postgres://db' },
      annotations: { 'com.example/team': 'payments', 'com.example/cfg': { a: [1, 2] } },
      syslog_url: 'tcp://logs.example.com:514',
    });
    expect(res.status).toBe(200);
    expect(res.body).toEqual({
      id: expect.stringMatching(/^[0-9A-Z]{26}$/),
      name: 'myapp',
      config: { DB_URL: 'postgres://db' },
      annotations: { 'com.example/team': 'payments', 'com.example/cfg': { a: [1, 2] } },
      syslog_url: 'tcp://logs.example.com:514',
      created_at: expect.stringMatching(ISO_MS),
      updated_at: res.body.created_at,
    });
    expect((await api.call('GET', `/v2/apps/${res.body.id}`)).body).toEqual(res.body);
  });

  it('leaves out empty config, annotations, syslog_url and shape, as Fn does', async () => {
    const app = await api.createApp({ name: 'bare' });
    expect(Object.keys(app).sort()).toEqual(['created_at', 'id', 'name', 'updated_at']);
    expect(Object.keys((await api.call('GET', `/v2/apps/${app.id}`)).body).sort()).toEqual(['created_at', 'id', 'name', 'updated_at']);
    expect(Object.keys(await api.createApp({ name: 'empty-shape', shape: '' })).sort()).toEqual(['created_at', 'id', 'name', 'updated_at']);
  });

  it('shows a shape only when one was set, and ignores shape in updates, as Fn does', async () => {
    const x86 = await api.createApp({ name: 'x86', shape: 'GENERIC_X86' });
    expect(x86.shape).toBe('GENERIC_X86');
    const bare = await api.createApp({ name: 'bare' });
    expect((await api.call('PUT', `/v2/apps/${bare.id}`, { shape: 'GENERIC_ARM' })).body).toEqual(bare);
    expect((await api.call('PUT', `/v2/apps/${x86.id}`, { shape: 'GENERIC_ARM' })).body).toEqual(x86);
    expect((await api.call('GET', '/v2/apps')).body.items.map((a: any) => a.shape)).toEqual([undefined, 'GENERIC_X86']);
  });

  it('accepts any Fn shape and letters of any script in names', async () => {
    expect((await api.createApp({ name: 'arm', shape: 'GENERIC_ARM' })).shape).toBe('GENERIC_ARM');
    expect((await api.createApp({ name: 'café_Ünïcode-名前-٣' })).name).toBe('café_Ünïcode-名前-٣');
  });

  it('reads JSON whatever the Content-Type (curl -d sends a form type)', async () => {
    const res = await api.call('POST', '/v2/apps', '{"name":"curlapp"}', { 'content-type': 'application/x-www-form-urlencoded' });
    expect(res.status).toBe(200);
    expect(res.body.name).toBe('curlapp');
  });

  it.each([
    ['broken JSON', '{"name":'],
    ['an empty body', ''],
    ['an array', '[{"name":"x"}]'],
    ['a string', '"x"'],
    ['a number name', '{"name": 5}'],
    ['a non-string config value', '{"name":"x","config":{"A":1}}'],
    ['a config array', '{"name":"x","config":["A"]}'],
    ['an annotations array', '{"name":"x","annotations":[1]}'],
    ['a numeric syslog_url', '{"name":"x","syslog_url":5}'],
  ])('answers 400 Invalid JSON to %s', async (_what, payload) => {
    await api.expectError('POST', '/v2/apps', payload, 400, 'Invalid JSON');
    expect(await appNames()).toEqual([]);
  });

  it.each([
    [{}, 'Missing Name'],
    [{ name: '' }, 'Missing Name'],
    [{ name: 'has space' }, 'Invalid app name'],
    [{ name: '../etc' }, 'Invalid app name'],
    [{ name: 'a/b' }, 'Invalid app name'],
    [{ name: 'a.b' }, 'Invalid app name'],
    [{ name: 'nul\u0000byte' }, 'Invalid app name'],
    [{ name: 'emoji😀' }, 'Invalid app name'],
    [{ name: 'x'.repeat(256) }, 'App name must be 255 characters or less'],
    [{ name: 'é'.repeat(128) }, 'App name must be 255 characters or less'],
    [{ name: 'x', id: 'abc' }, 'App ID cannot be supplied on create'],
    [{ name: 'x', shape: 'GENERIC_MIPS' }, 'Invalid app shape'],
    [{ name: 'x', syslog_url: 'http://logs:514' }, 'invalid syslog url: "http://logs:514" invalid scheme, only [tcp, udp, unix, unixgram, tcp+tls] are supported'],
    [{ name: 'x', syslog_url: 'logs:514' }, 'invalid syslog url: "logs:514" invalid scheme, only [tcp, udp, unix, unixgram, tcp+tls] are supported'],
    [{ name: 'x', annotations: { 'bad key': 'v' } }, 'Invalid annotation key, annotation keys must be non-empty ascii strings excluding whitespace'],
    [{ name: 'x', annotations: { ключ: 'v' } }, 'Invalid annotation key, annotation keys must be non-empty ascii strings excluding whitespace'],
    [{ name: 'x', annotations: { ['k'.repeat(129)]: 'v' } }, 'Invalid annotation key length, annotation keys may not be larger than 128 bytes'],
    [{ name: 'x', annotations: { k: '' } }, 'Invalid annotation value, annotation values may only be non-empty strings, numbers, objects, or arrays'],
    [{ name: 'x', annotations: { k: 'v'.repeat(511) } }, 'Invalid annotation value length, annotation values may not be larger than 512 bytes when serialized as JSON'],
    [
      { name: 'x', annotations: Object.fromEntries(Array.from({ length: 101 }, (_, i) => [`k${i}`, i])) },
      'Invalid annotation change, new key(s) exceed maximum permitted number of annotations keys (100)',
    ],
    [{ name: 'x', config: { 'A=B': 'v' } }, "Invalid config key, config keys must be non-empty and must not contain '=' or NUL"],
    // Docker cannot pass a NUL in an environment variable: the fn's containers could never start.
    [{ name: 'x', config: { A: 'a\u0000b' } }, 'Invalid config value, config values must not contain NUL'],
    [{ name: 'x', config: { A: 'x'.repeat(65537) } }, 'Invalid config, config keys must be at most 256 bytes, values at most 65536 bytes, and the whole config at most 262144 bytes'],
  ])("answers 400 to %j with Fn's message", async (payload, message) => {
    await api.expectError('POST', '/v2/apps', payload, 400, message);
    expect(await appNames()).toEqual([]);
  });

  it.each([['Blue'], ['-blue'], ['blue-'], ['a_b'], ['x'.repeat(64)], [5], [{ group: 'blue' }]])('answers 400 to the runner group %j, saying what a group name is', async (group) => {
    const message = "Invalid annotation fnts.io/runner-group, it must be a string of 1 to 40 lower case letters, digits and '-', starting and ending with a letter or digit";
    await api.expectError('POST', '/v2/apps', { name: 'grouped', annotations: { 'fnts.io/runner-group': group } }, 400, message);
    const app = await api.createApp({ name: 'plain' });
    await api.expectError('PUT', `/v2/apps/${app.id}`, { annotations: { 'fnts.io/runner-group': group } }, 400, message);
    expect(await appNames()).toEqual(['plain']);
  });

  it('keeps a runner group named as a DNS label, and lets an update remove it', async () => {
    const app = await api.createApp({ name: 'grouped', annotations: { 'fnts.io/runner-group': 'gpu-2' } });
    expect(app.annotations).toEqual({ 'fnts.io/runner-group': 'gpu-2' });
    expect((await api.call('PUT', `/v2/apps/${app.id}`, { annotations: { 'fnts.io/runner-group': '' } })).body.annotations).toBeUndefined();
  });

  it('accepts a 255-byte name and every syslog scheme Fn supports', async () => {
    await api.createApp({ name: 'x'.repeat(255) });
    for (const [i, url] of ['udp://h:514', 'tcp://h:514', 'unix:///dev/log', 'unixgram:///dev/log', 'tcp+tls://h:6514'].entries()) {
      expect((await api.createApp({ name: `s${i}`, syslog_url: url })).syslog_url).toBe(url);
    }
  });

  it('answers 409 App already exists to a second app of the same name', async () => {
    await api.createApp({ name: 'dup' });
    await api.expectError('POST', '/v2/apps', { name: 'dup' }, 409, 'App already exists');
    expect(await appNames()).toEqual(['dup']);
  });

  it('refuses a body over the API size limit with 413 and creates nothing', async () => {
    const res = await api.call('POST', '/v2/apps', { name: 'big', config: { BLOB: 'x'.repeat(2 * 1024 * 1024) } });
    expect(res.status).toBe(413);
    expect(res.body).toEqual({ message: 'Request content too large' });
    expect(await appNames()).toEqual([]);
  });

  it('keeps "__proto__" and other odd keys as plain config entries', async () => {
    const app = await api.createApp({ name: 'odd', config: JSON.parse('{"__proto__":"p","constructor":"c","ünï":"u"}') });
    const got = (await api.call('GET', `/v2/apps/${app.id}`)).body;
    expect(Object.keys(got.config).sort()).toEqual(['__proto__', 'constructor', 'ünï']);
    expect(got.config['__proto__']).toBe('p');
  });

  it('stores lone surrogates as the replacement character instead of failing', async () => {
    const app = await api.createApp({ name: 'surrogate', config: JSON.parse('{"K":"a\\ud800b"}') });
    expect(app.config.K).toBe('a\ufffdb');
  });
});

describe('GET /v2/apps/{appID}', () => {
  it('answers 404 App not found for an unknown id', async () => {
    await api.expectError('GET', '/v2/apps/01ABCDEF', undefined, 404, 'App not found');
    await api.expectError('GET', '/v2/apps/..%2F..%2Fetc', undefined, 404, 'App not found');
  });
});

describe('PUT /v2/apps/{appID}', () => {
  it('merges config and annotations, deleting keys set to ""', async () => {
    const app = await api.createApp({ name: 'm', config: { A: '1', B: '2' }, annotations: { x: 1, y: 2 } });
    const res = await api.call('PUT', `/v2/apps/${app.id}`, { config: { B: '', C: '3' }, annotations: { y: '', z: 3 } });
    expect(res.status).toBe(200);
    expect(res.body.config).toEqual({ A: '1', C: '3' });
    expect(res.body.annotations).toEqual({ x: 1, z: 3 });
    expect(res.body.updated_at > app.updated_at || res.body.updated_at === app.updated_at).toBe(true);
    expect((await api.call('GET', `/v2/apps/${app.id}`)).body).toEqual(res.body);
  });

  it('sets and clears the syslog URL', async () => {
    const app = await api.createApp({ name: 's' });
    expect((await api.call('PUT', `/v2/apps/${app.id}`, { syslog_url: 'udp://h:514' })).body.syslog_url).toBe('udp://h:514');
    const cleared = await api.call('PUT', `/v2/apps/${app.id}`, { syslog_url: '' });
    expect(cleared.body).not.toHaveProperty('syslog_url');
  });

  it('moves updated_at only when something changed', async () => {
    const app = await api.createApp({ name: 'u', config: { A: '1' } });
    // A second later by the server's clock: any write now moves updated_at.
    vi.useFakeTimers({ toFake: ['Date'] });
    try {
      vi.setSystemTime(Date.parse(app.updated_at) + 1000);
      const same = await api.call('PUT', `/v2/apps/${app.id}`, { config: { A: '1' } });
      expect(same.body.updated_at).toBe(app.updated_at);
      const changed = await api.call('PUT', `/v2/apps/${app.id}`, { config: { A: '2' } });
      expect(changed.body.updated_at > app.updated_at).toBe(true);
      expect(changed.body.created_at).toBe(app.created_at);
    } finally {
      vi.useRealTimers();
    }
  });

  it('accepts the whole record echoed back, as the fn CLI sends it', async () => {
    const app = await api.createApp({ name: 'echo', config: { A: '1' } });
    const res = await api.call('PUT', `/v2/apps/${app.id}`, {
      ...app,
      created_at: '0001-01-01T00:00:00.000Z',
      updated_at: '0001-01-01T00:00:00.000Z',
      config: { B: '2' },
    });
    expect(res.status).toBe(200);
    expect(res.body.config).toEqual({ A: '1', B: '2' });
  });

  it("answers Fn's errors and changes nothing", async () => {
    const app = await api.createApp({ name: 'keep', config: { A: '1' } });
    await api.expectError('PUT', `/v2/apps/${app.id}`, { name: 'other' }, 409, 'Could not update - name is immutable');
    await api.expectError('PUT', `/v2/apps/${app.id}`, { id: 'other' }, 400, 'App ID in path does not match ID in body');
    await api.expectError('PUT', `/v2/apps/${app.id}`, '{', 400, 'Invalid JSON');
    await api.expectError(
      'PUT',
      `/v2/apps/${app.id}`,
      { config: { A: '2' }, annotations: { 'bad key': 1 } },
      400,
      'Invalid annotation key, annotation keys must be non-empty ascii strings excluding whitespace',
    );
    await api.expectError('PUT', `/v2/apps/${app.id}`, { syslog_url: 'ftp://x' }, 400, 'invalid syslog url: "ftp://x" invalid scheme, only [tcp, udp, unix, unixgram, tcp+tls] are supported');
    await api.expectError('PUT', `/v2/apps/${app.id}`, { config: { A: '2', B: 'x\u0000' } }, 400, 'Invalid config value, config values must not contain NUL');
    await api.expectError('PUT', '/v2/apps/nope', { config: { A: '2' } }, 404, 'App not found');
    expect((await api.call('GET', `/v2/apps/${app.id}`)).body).toEqual(app);
  });
});

describe('DELETE /v2/apps/{appID}', () => {
  it("answers 204 with no body, then 404, and takes the app's fns and triggers with it", async () => {
    const app = await api.createApp({ name: 'doomed' });
    const fn = await api.createFn({ app_id: app.id, name: 'f', image: 'fnproject/hello:0.0.1' });
    const trigger = await api.createTrigger({ app_id: app.id, fn_id: fn.id, name: 't', type: 'http', source: '/t' });
    const res = await api.call('DELETE', `/v2/apps/${app.id}`);
    expect(res.status).toBe(204);
    expect(res.raw).toBe('');
    await api.expectError('DELETE', `/v2/apps/${app.id}`, undefined, 404, 'App not found');
    await api.expectError('GET', `/v2/fns/${fn.id}`, undefined, 404, 'Fn not found');
    await api.expectError('GET', `/v2/triggers/${trigger.id}`, undefined, 404, 'Trigger not found');
  });
});

describe('GET /v2/apps', () => {
  it('lists apps by name, 30 per page by default, at most 100, following next_cursor', async () => {
    const names = Array.from({ length: 105 }, (_, i) => `app-${String(i).padStart(3, '0')}`);
    for (const name of [...names].reverse()) await api.createApp({ name });

    const first = await api.call('GET', '/v2/apps');
    expect(first.body.items).toHaveLength(30);
    expect(first.body.items[0].name).toBe('app-000');
    expect(typeof first.body.next_cursor).toBe('string');

    expect((await api.call('GET', '/v2/apps?per_page=1000')).body.items).toHaveLength(100);
    expect((await api.call('GET', '/v2/apps?per_page=0')).body.items).toHaveLength(30);
    expect((await api.call('GET', '/v2/apps?per_page=junk')).body.items).toHaveLength(30);

    const seen: string[] = [];
    let cursor: string | undefined;
    do {
      const page = await api.call('GET', `/v2/apps?per_page=40${cursor ? `&cursor=${cursor}` : ''}`);
      expect(page.status).toBe(200);
      seen.push(...page.body.items.map((a: any) => a.name));
      cursor = page.body.next_cursor;
    } while (cursor);
    expect(seen).toEqual(names);
  });

  it('answers an empty list with items: [] and no cursor', async () => {
    expect((await api.call('GET', '/v2/apps')).body).toEqual({ items: [] });
  });

  it('filters by exact name', async () => {
    await api.createApp({ name: 'alpha' });
    await api.createApp({ name: 'alphabet' });
    const res = await api.call('GET', '/v2/apps?name=alpha');
    expect(res.body.items.map((a: any) => a.name)).toEqual(['alpha']);
  });

  it('answers 400 to a cursor it never gave out', async () => {
    await api.expectError('GET', '/v2/apps?cursor=%25%25%25', undefined, 400, 'Invalid cursor');
  });
});

describe('methods and paths', () => {
  it('answers 405 naming the method and path for unsupported methods', async () => {
    await api.expectError('PATCH', '/v2/apps', undefined, 405, 'Method not allowed: PATCH /v2/apps');
    await api.expectError('DELETE', '/v2/apps', undefined, 405, 'Method not allowed: DELETE /v2/apps');
    await api.expectError('POST', '/v2/apps/abc', {}, 405, 'Method not allowed: POST /v2/apps/abc');
  });

  it('serves paths with a trailing slash', async () => {
    await api.createApp({ name: 'slash' });
    expect((await api.call('GET', '/v2/apps/')).body.items).toHaveLength(1);
  });
});
