import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { VERSION } from '../../src/server/index.js';
import { startApi, type TestApi } from '../support/api.js';

let api: TestApi;
beforeEach(async () => {
  api = await startApi();
});
afterEach(async () => {
  await api.close();
});

describe('server basics', () => {
  it('answers GET / with 200', async () => {
    const res = await api.call('GET', '/');
    expect(res.status).toBe(200);
  });

  it('answers GET /version with the package version', async () => {
    expect((await api.call('GET', '/version')).body).toEqual({ version: VERSION });
    expect(VERSION).toMatch(/^\d+\.\d+\.\d+/);
  });

  it("answers unknown paths with Fn's 404 naming method and path", async () => {
    const res = await api.call('GET', '/v3/apps?x=1');
    expect(res).toMatchObject({ status: 404, body: { message: 'Path not found: GET /v3/apps' } });
  });

  it('answers a malformed URL with 400 Path malformed', async () => {
    const res = await api.call('GET', '/v2/apps/%zz');
    expect(res).toMatchObject({ status: 400, body: { message: 'Path malformed' } });
  });

  it('never answers hostile input with a 5xx', async () => {
    const bodies = [
      '\u0000',
      '{"name":"\\u0000"}',
      '{"name":{"$gt":""}}',
      'null',
      'true',
      '{"name":"x","annotations":{"k":{"deep":' + '['.repeat(2000) + ']'.repeat(2000) + '}}}',
      '\ud800',
      '{"name":"x"',
    ];
    const urls = ['/v2/apps', '/v2/fns', '/v2/triggers'];
    for (const url of urls) {
      for (const body of bodies) {
        const res = await api.call('POST', url, body);
        expect(res.status, `${url} ${JSON.stringify(body).slice(0, 40)} -> ${res.raw}`).toBeGreaterThanOrEqual(400);
        expect(res.status).toBeLessThan(500);
      }
    }
    expect((await api.call('GET', '/v2/apps')).body.items).toEqual([]);
  });
});

describe('answers as Fn does where the framework would answer for it', () => {
  it("answers GET / with Fn's exact body", async () => {
    const res = await api.call('GET', '/');
    expect(res.status).toBe(200);
    expect(res.raw).toBe('{"goto":"https://github.com/fnproject/fn","hello":"world!"}');
    expect(res.headers['content-type']).toMatch(/^application\/json/);
  });

  // Fn 0.3.753 answers HEAD on every API path with 405, not as a GET.
  it.each(['/', '/version', '/v2/apps', '/v2/apps/A1', '/v2/fns', '/v2/fns/F1', '/v2/triggers', '/v2/triggers/T1'])('answers HEAD %s with 405', async (path) => {
    await api.expectError('HEAD', path, undefined, 405, `Method not allowed: HEAD ${path}`);
  });

  it('answers HEAD on an unknown path with 404', async () => {
    expect((await api.call('HEAD', '/v3/apps')).status).toBe(404);
  });

  it('answers other methods on / and /version with 405 naming method and path', async () => {
    await api.expectError('POST', '/', undefined, 405, 'Method not allowed: POST /');
    await api.expectError('DELETE', '/version', undefined, 405, 'Method not allowed: DELETE /version');
  });

  it('answers a method Node parses but Fastify has no route for with 405 on API paths, 404 elsewhere', async () => {
    await api.expectError('BIND' as 'GET', '/v2/apps', undefined, 405, 'Method not allowed: BIND /v2/apps');
    await api.expectError('PROPFIND' as 'GET', '/v2/fns/F1/', undefined, 405, 'Method not allowed: PROPFIND /v2/fns/F1/');
    await api.expectError('BIND' as 'GET', '/v3/apps', undefined, 404, 'Path not found: BIND /v3/apps');
  });

  it("answers an id of any length with the resource's 404, as Fn does below its crash at 256 bytes", async () => {
    const long = 'a'.repeat(5000);
    await api.expectError('GET', `/v2/apps/${long}`, undefined, 404, 'App not found');
    await api.expectError('PUT', `/v2/apps/${long}`, { config: { A: '1' } }, 404, 'App not found');
    await api.expectError('DELETE', `/v2/fns/${long}`, undefined, 404, 'Fn not found');
    await api.expectError('GET', `/v2/triggers/${long}`, undefined, 404, 'Trigger not found');
  });
});
