/**
 * Tokens on the management API, against the real server (production
 * wiring, a real SQLite file): every /v2 route refuses a request without a
 * valid token (the walk covers the routes the server really registered,
 * so a new one cannot slip by), roles and app limits decide what a token
 * may do, tokens are shown once and stored only as digests, and a token
 * is checked fast whatever it looks like.
 */
import { readFileSync } from 'node:fs';
import { connect } from 'node:net';
import { pino } from 'pino';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { compileConfig } from '../../src/config/index.js';
import { createHash, randomBytes } from 'node:crypto';
import { openSqlite, SecretBox, SqlSecretStore } from '../../src/datastore/index.js';
import { SqlQueue } from '../../src/mq/index.js';
import { Changes } from '../../src/models/index.js';
import { buildServer, routesOf } from '../../src/server/index.js';
import { bearer, TEST_ADMIN_TOKEN, testTokens } from '../support/auth.js';
import { startTestServer, type TestServer } from '../support/server.js';

const UNAUTHENTICATED = "Authentication required: send 'Authorization: Bearer <token>' (the fn CLI sends FN_TOKEN)";
const INVALID = 'Invalid token: it is unknown, revoked or expired';

describe('every /v2 route needs a token', () => {
  let url: string;
  let routes: Array<{ url: string; methods: readonly string[] }>;
  let close: () => Promise<void>;

  beforeAll(async () => {
    // The whole API a node can serve: apps, fns, triggers, calls, redrive, tokens, the fleet's endpoints.
    const datastore = await openSqlite(':memory:');
    const tokens = await testTokens(datastore);
    const config = compileConfig({ FN_LOG_LEVEL: 'silent', FNTS_ADMIN_TOKEN: TEST_ADMIN_TOKEN });
    const app = await buildServer({
      config,
      logger: pino({ level: 'silent' }),
      api: {
        datastore,
        calls: datastore.calls,
        queue: new SqlQueue(() => datastore.database()),
        changes: new Changes(pino({ level: 'silent' })),
        tokens,
        secrets: new SqlSecretStore(() => datastore.database(), new SecretBox(randomBytes(32)), datastore.disk),
      },
    });
    await app.listen({ port: 0, host: '127.0.0.1' });
    url = `http://127.0.0.1:${(app.server.address() as { port: number }).port}`;
    routes = routesOf(app).filter((r) => r.url.startsWith('/v2'));
    close = async () => {
      await app.close();
      tokens.registry.close();
      await datastore.close();
    };
  });
  afterAll(() => close?.());

  /** A concrete path for a route template. */
  const concrete = (template: string): string => template.replace(/:[A-Za-z]+/g, '01ARZ3NDEKTSV4RRFFQ69G5FAV').replace('*', 'hello');

  it('walks the routes the server registered: each method of each answers 401 in Fn words, with WWW-Authenticate', async () => {
    const templates = routes.map((r) => r.url);
    // The walk is over the real list: these must be in it (and anything added later is walked too).
    for (const known of [
      '/v2/apps',
      '/v2/apps/:appID',
      '/v2/fns/:fnID',
      '/v2/triggers',
      '/v2/fns/:fnID/calls/:callID/log',
      '/v2/fns/:fnID/calls/:callID/retry',
      '/v2/tokens',
      '/v2/runner/calls',
      '/v2/apps/:appID/secrets/:name',
      '/v2/fns/:fnID/secrets',
    ]) {
      expect(templates).toContain(known);
    }
    let walked = 0;
    for (const route of routes) {
      for (const method of ['GET', 'POST', 'PUT', 'DELETE', 'PATCH'].filter((m) => route.methods.includes(m))) {
        for (const [authorization, message] of [
          [undefined, UNAUTHENTICATED],
          ['Bearer fnts_0123456789abcdef_AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA', INVALID],
        ] as const) {
          const res = await fetch(url + concrete(route.url), {
            method,
            headers: { 'content-type': 'application/json', ...(authorization ? { authorization } : {}) },
            ...(method === 'GET' ? {} : { body: '{"name":"x"}' }),
          });
          expect({ route: route.url, method, status: res.status, body: await res.json() }).toEqual({ route: route.url, method, status: 401, body: { message } });
          expect(res.headers.get('www-authenticate')).toMatch(/^Bearer/);
          walked++;
        }
      }
    }
    expect(walked).toBeGreaterThan(40);
  });

  it('answers 401 before 404 or 405: a path or method that does not exist reveals nothing without a token', async () => {
    for (const [method, path] of [
      ['GET', '/v2/nothing/here'],
      ['GET', '/v2'],
      ['PATCH', '/v2/apps'],
      ['BIND', '/v2/apps'],
    ] as const) {
      const res = await fetch(url + path, { method });
      expect({ path, method, status: res.status }).toEqual({ path, method, status: 401 });
    }
    // With a token, the same requests get their 404 and 405.
    expect((await fetch(`${url}/v2/nothing/here`, { headers: bearer() })).status).toBe(404);
    expect((await fetch(`${url}/v2/apps`, { method: 'PATCH', headers: bearer() })).status).toBe(405);
  });

  it('leaves /, /version, /health, /ready and /metrics open', async () => {
    for (const path of ['/', '/version', '/health', '/ready']) expect({ path, status: (await fetch(url + path)).status }).toEqual({ path, status: 200 });
  });

  it('takes the scheme word in any case, and refuses every other shape of credentials with 401', async () => {
    for (const scheme of ['Bearer', 'bearer', 'BEARER', 'BeArEr']) {
      expect((await fetch(`${url}/v2/apps`, { headers: { authorization: `${scheme} ${TEST_ADMIN_TOKEN}` } })).status).toBe(200);
    }
    for (const authorization of [
      'Bearer',
      'Bearer ',
      `Basic ${Buffer.from(`admin:${TEST_ADMIN_TOKEN}`).toString('base64')}`,
      TEST_ADMIN_TOKEN,
      `Bearer ${TEST_ADMIN_TOKEN}x`,
      `Bearer ${TEST_ADMIN_TOKEN} extra`,
      `Bearer ${'x'.repeat(8000)}`,
      'Token abc',
    ]) {
      const res = await fetch(`${url}/v2/apps`, { headers: { authorization } });
      expect({ authorization: authorization.slice(0, 40), status: res.status }).toEqual({ authorization: authorization.slice(0, 40), status: 401 });
    }
  });

  it('refuses a token of non-ASCII bytes, and one far past the header limit, without harm', async () => {
    const raw = (request: Buffer): Promise<string> =>
      new Promise((resolve, reject) => {
        const { port } = new URL(url);
        const socket = connect(Number(port), '127.0.0.1');
        let answer = '';
        socket.on('data', (b) => (answer += b.toString('latin1')));
        socket.on('end', () => resolve(answer));
        socket.on('close', () => resolve(answer));
        socket.on('error', reject);
        socket.end(request);
      });
    const nonAscii = await raw(
      Buffer.concat([Buffer.from('GET /v2/apps HTTP/1.1\r\nHost: x\r\nConnection: close\r\nAuthorization: Bearer '), Buffer.from('tökén-ünïcødé-✓', 'utf8'), Buffer.from('\r\n\r\n')]),
    );
    expect(nonAscii).toMatch(/^HTTP\/1\.1 401/);
    // 10 MB of token: Node's parser stops at its header limit (16 KiB) and answers 431 at once.
    const t0 = performance.now();
    const huge = await raw(Buffer.from(`GET /v2/apps HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${'a'.repeat(10 * 1024 * 1024)}\r\n\r\n`));
    expect(huge).toMatch(/^HTTP\/1\.1 431/);
    expect(performance.now() - t0).toBeLessThan(5000);
    expect((await fetch(`${url}/v2/apps`, { headers: bearer() })).status).toBe(200);
  });

  it('keeps answering the right token while a burst of wrong ones comes in (no slow hashing per request)', async () => {
    let wrongDone = 0;
    const burst = Array.from({ length: 8 }, async (_, i) => {
      for (let j = 0; j < 150; j++) {
        const res = await fetch(`${url}/v2/apps`, { headers: { authorization: `Bearer fnts_${(i * 1000 + j).toString(16).padStart(16, '0')}_${'B'.repeat(43)}` } });
        expect(res.status).toBe(401);
        await res.arrayBuffer();
        wrongDone++;
      }
    });
    const rightMs: number[] = [];
    while (wrongDone < 1000) {
      const t0 = performance.now();
      const res = await fetch(`${url}/v2/apps`, { headers: bearer() });
      expect(res.status).toBe(200);
      await res.arrayBuffer();
      rightMs.push(performance.now() - t0);
    }
    await Promise.all(burst);
    rightMs.sort((a, b) => a - b);
    // A token check is a digest and a map lookup: the right token waits only its turn on the event loop.
    // Generous for a shared 2-core machine; a KDF per request (tens of ms each) would blow through it.
    expect(rightMs[Math.floor(rightMs.length / 2)]!).toBeLessThan(100);
  });
});

describe('tokens, roles and app limits', () => {
  let s: TestServer;
  const as = (token: string) => ({
    get: (path: string) => s.call(path, { method: 'GET', headers: bearer(token) }),
    post: (path: string, body: unknown) => s.call(path, { body, headers: { ...bearer(token), 'content-type': 'application/json' } }),
    put: (path: string, body: unknown) => s.call(path, { method: 'PUT', body, headers: { ...bearer(token), 'content-type': 'application/json' } }),
    del: (path: string) => s.call(path, { method: 'DELETE', headers: bearer(token) }),
  });
  const admin = () => as(TEST_ADMIN_TOKEN);
  const make = async (body: Record<string, unknown>): Promise<{ id: string; token: string }> => {
    const res = await admin().post('/v2/tokens', body);
    expect(res.status, res.text).toBe(200);
    return res.json;
  };

  beforeAll(async () => {
    s = await startTestServer();
  });
  afterAll(() => s?.close());

  it('shows a new token once, lists tokens without secrets, and keeps only a digest in the database', async () => {
    const res = await admin().post('/v2/tokens', { name: 'ci-deploy', role: 'developer' });
    expect(res.status).toBe(200);
    expect(res.json).toMatchObject({ name: 'ci-deploy', role: 'developer', id: expect.stringMatching(/^[0-9a-f]{16}$/), token: expect.stringMatching(/^fnts_[0-9a-f]{16}_[A-Za-z0-9_-]{43}$/) });
    const { id, token } = res.json;
    const listed = await admin().get('/v2/tokens');
    const mine = listed.json.items.find((t: any) => t.id === id);
    expect(Object.keys(mine).sort()).toEqual(['created_at', 'id', 'name', 'role']);
    expect(listed.text).not.toContain(token.slice(22));
    expect((await admin().get(`/v2/tokens/${id}`)).json).toEqual(mine);
    // The SQLite file (and its write-ahead log) never holds the token itself.
    const file = s.config.dbUrl.replace('sqlite3://', '');
    const bytes = Buffer.concat([readFileSync(file), ...['-wal'].map((x) => readFileSync(file + x, { flag: 'a+' }))]);
    expect(bytes.includes(Buffer.from(token))).toBe(false);
    expect(bytes.includes(Buffer.from(token.slice(22)))).toBe(false);
  });

  it('refuses bad token requests with 400 in plain words', async () => {
    for (const [body, message] of [
      [{ role: 'viewer' }, 'Invalid token name: it must be a string of 1 to 255 characters'],
      [{ name: 'x', role: 'root' }, 'Invalid token role: use one of admin, developer, viewer, invoker, fleet'],
      [{ name: 'x', role: 'viewer', apps: 'a1' }, 'Invalid token apps: it must be a list of app names'],
      [{ name: 'x', role: 'viewer', apps: [1] }, 'Invalid token apps: it must be a list of app names'],
      [{ name: 'x', role: 'viewer', expires_at: '2001-01-01T00:00:00Z' }, 'Invalid expires_at: it must be an RFC 3339 time in the future'],
      [{ name: 'x', role: 'viewer', expires_at: 'tomorrow' }, 'Invalid expires_at: it must be an RFC 3339 time in the future'],
    ] as const) {
      const res = await admin().post('/v2/tokens', body);
      expect({ status: res.status, body: res.json }).toEqual({ status: 400, body: { message } });
    }
    expect((await admin().del('/v2/tokens/0000000000000000')).status).toBe(404);
  });

  it('gives each role its rights: viewer reads, developer changes, invoker and fleet neither manage nor change', async () => {
    const [viewer, developer, invoker, fleet] = await Promise.all(['viewer', 'developer', 'invoker', 'fleet'].map((role) => make({ name: role, role })));
    const created = await as(developer!.token).post('/v2/apps', { name: 'by-developer' });
    expect(created.status).toBe(200);
    const appId = created.json.id;
    expect((await as(developer!.token).put(`/v2/apps/${appId}`, { config: { A: '1' } })).status).toBe(200);
    expect((await as(developer!.token).get('/v2/tokens')).status).toBe(403);

    expect((await as(viewer!.token).get('/v2/apps')).status).toBe(200);
    expect((await as(viewer!.token).get(`/v2/apps/${appId}`)).json.config).toEqual({ A: '1' });
    const refused = await as(viewer!.token).post('/v2/apps', { name: 'by-viewer' });
    expect({ status: refused.status, message: refused.json.message }).toEqual({ status: 403, message: 'Forbidden: this token may not do this (role viewer)' });
    expect((await as(viewer!.token).del(`/v2/apps/${appId}`)).status).toBe(403);
    expect((await as(viewer!.token).post('/v2/tokens', { name: 'escalate', role: 'admin' })).status).toBe(403);

    expect((await as(invoker!.token).get('/v2/apps')).status).toBe(403);
    expect((await as(fleet!.token).get(`/v2/apps/${appId}`)).status).toBe(200);
    expect((await as(fleet!.token).post('/v2/apps', { name: 'by-fleet' })).status).toBe(403);
    expect((await as(fleet!.token).post('/v2/runner/tokens/check', { authorization: `Bearer ${invoker!.token}`, app: 'by-developer' })).json).toEqual({ verdict: 'ok' });
    expect((await as(developer!.token).post('/v2/runner/tokens/check', { authorization: `Bearer ${invoker!.token}`, app: 'by-developer' })).status).toBe(403);
    // What an LB needs to keep the operator's FNTS_ADMIN_TOKEN (not of fnts's shape) from functions: its digest, to the fleet only.
    expect((await as(fleet!.token).get('/v2/runner/tokens/unshaped')).json).toEqual({ digests: [createHash('sha256').update(TEST_ADMIN_TOKEN).digest('hex')] });
    expect((await as(developer!.token).get('/v2/runner/tokens/unshaped')).status).toBe(403);
    // The app is still there: nothing refused changed anything.
    expect((await admin().get(`/v2/apps/${appId}`)).json.name).toBe('by-developer');
  });

  it('limits a token to its apps: lists show only them, anything else (even what does not exist) is 403', async () => {
    const mine = (await admin().post('/v2/apps', { name: 'mine' })).json;
    const theirs = (await admin().post('/v2/apps', { name: 'theirs' })).json;
    const theirFn = (await admin().post('/v2/fns', { app_id: theirs.id, name: 'f', image: 'fnproject/hello' })).json;
    const limited = as((await make({ name: 'team-a', role: 'developer', apps: ['mine', 'mine-later'] })).token);

    const listed = await limited.get('/v2/apps');
    expect(listed.json.items.map((a: any) => a.name)).toEqual(['mine']);
    expect((await limited.get(`/v2/apps/${mine.id}`)).status).toBe(200);
    expect((await limited.post('/v2/fns', { app_id: mine.id, name: 'f', image: 'fnproject/hello' })).status).toBe(200);
    expect((await limited.post('/v2/apps', { name: 'mine-later' })).status).toBe(200);

    for (const [what, res] of [
      ['their app', await limited.get(`/v2/apps/${theirs.id}`)],
      ['an app that does not exist', await limited.get('/v2/apps/01NOSUCHAPP000000000000000')],
      ['a fn that does not exist', await limited.get('/v2/fns/01NOSUCHFN0000000000000000')],
      ['their fn', await limited.get(`/v2/fns/${theirFn.id}`)],
      ['their fn changed', await limited.put(`/v2/fns/${theirFn.id}`, { memory: 256 })],
      ['their fns listed', await limited.get(`/v2/fns?app_id=${theirs.id}`)],
      ['their triggers listed', await limited.get(`/v2/triggers?app_id=${theirs.id}`)],
      ['a fn made in their app', await limited.post('/v2/fns', { app_id: theirs.id, name: 'g', image: 'fnproject/hello' })],
      ['an app of another name', await limited.post('/v2/apps', { name: 'elsewhere' })],
      // The API reads field names in any case, as Go does: so does the check.
      ['a fn made in their app, App_ID', await limited.post('/v2/fns', { App_ID: theirs.id, name: 'h', image: 'fnproject/hello' })],
      ['an app of another name, NAME', await limited.post('/v2/apps', { NAME: 'elsewhere' })],
      ['their calls', await limited.get(`/v2/fns/${theirFn.id}/calls`)],
      ['their app deleted', await limited.del(`/v2/apps/${theirs.id}`)],
    ] as const) {
      expect({ what, status: res.status, message: res.json?.message }).toEqual({ what, status: 403, message: 'Forbidden: this token may not use this app' });
    }
    expect((await admin().get(`/v2/fns/${theirFn.id}`)).json.memory).toBe(128);
    // A token limited to apps manages no tokens, whatever its role.
    const limitedAdmin = as((await make({ name: 'team-a-admin', role: 'admin', apps: ['mine'] })).token);
    expect((await limitedAdmin.post('/v2/tokens', { name: 'wider', role: 'admin' })).status).toBe(403);
  });

  it('stops a revoked token at once on this node, and an expired one when it expires', async () => {
    const { id, token } = await make({ name: 'short', role: 'viewer' });
    expect((await as(token).get('/v2/apps')).status).toBe(200);
    expect((await admin().del(`/v2/tokens/${id}`)).status).toBe(204);
    const after = await as(token).get('/v2/apps');
    expect({ status: after.status, message: after.json.message }).toEqual({ status: 401, message: INVALID });
    expect((await admin().get(`/v2/tokens/${id}`)).status).toBe(404);

    const expiring = await make({ name: 'expiring', role: 'viewer', expires_at: new Date(Date.now() + 1500).toISOString() });
    expect((await as(expiring.token).get('/v2/apps')).status).toBe(200);
    await new Promise((r) => setTimeout(r, 1600)); // the token's own lifetime
    expect((await as(expiring.token).get('/v2/apps')).status).toBe(401);
  });
});
