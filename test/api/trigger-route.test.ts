/**
 * A trigger whose source was written with escapes answers where its endpoint
 * annotation says, over a real server and a real function: the route decodes
 * the request path before matching, and the source is kept decoded.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { probeImage } from '../support/functions.js';
import { startTestServer, type TestServer } from '../support/server.js';

let fnts: TestServer;
beforeAll(async () => {
  fnts = await startTestServer();
});
afterAll(async () => {
  await fnts.close();
});

describe('trigger sources with escapes', () => {
  it('answer on their endpoint, however the caller spells the path', async () => {
    const app = await fnts.app({ name: 'routes' });
    const fn = await fnts.fn(app, await probeImage());
    const t = await fnts.post('/v2/triggers', { app_id: app.id, fn_id: fn.id, name: 'cafe', type: 'http', source: '/caf%C3%A9' });
    const endpoint: string = t.annotations['fnproject.io/trigger/httpEndpoint'];
    expect(endpoint).toBe(`${fnts.url}/t/routes/caf%C3%A9`);

    const viaEndpoint = await fetch(endpoint, { method: 'POST', body: '{}' });
    expect(viaEndpoint.status, await viaEndpoint.clone().text()).toBe(200);
    expect(((await viaEndpoint.json()) as { method: string }).method).toBe('POST');
    // fetch escapes the path itself; lower-case hex is the same path.
    expect((await fetch(`${fnts.url}/t/routes/café`, { method: 'POST', body: '{}' })).status).toBe(200);
    expect((await fetch(`${fnts.url}/t/routes/caf%c3%a9`, { method: 'POST', body: '{}' })).status).toBe(200);
  });
});
