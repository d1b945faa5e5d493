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

  it('answers unknown paths with Fn\'s 404 naming method and path', async () => {
    const res = await api.call('GET', '/v3/apps?x=1');
    expect(res).toMatchObject({ status: 404, body: { message: 'Path not found: GET /v3/apps' } });
  });

  it('answers a malformed URL with 400 Path malformed', async () => {
    const res = await api.call('GET', '/v2/apps/%zz');
    expect(res).toMatchObject({ status: 400, body: { message: 'Path malformed' } });
  });

  it('never answers hostile input with a 5xx', async () => {
    const bodies = ['\u0000', '{"name":"\\u0000"}', '{"name":{"$gt":""}}', 'null', 'true', '{"name":"x","annotations":{"k":{"deep":' + '['.repeat(2000) + ']'.repeat(2000) + '}}}', '\ud800', '{"name":"x"'];
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
