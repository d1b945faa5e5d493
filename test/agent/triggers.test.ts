import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { probeImage } from '../support/functions.js';
import { startTestServer, type TestServer } from '../support/server.js';

let s: TestServer;
let app: any;
let fn: any;

beforeAll(async () => {
  const probe = await probeImage();
  s = await startTestServer();
  app = await s.app({ name: 'shop' });
  fn = await s.fn(app, probe);
  await s.post('/v2/triggers', { app_id: app.id, fn_id: fn.id, name: 'orders', type: 'http', source: '/orders/new' });
  await s.post('/v2/triggers', { app_id: app.id, fn_id: fn.id, name: 'root', type: 'http', source: '/' });
});
afterAll(async () => {
  await s?.close();
});

describe('HTTP triggers', () => {
  it("hand the caller's method, URL and headers to the function the way Fn does", async () => {
    const res = await s.call('/t/shop/orders/new?id=7&x=%20y', {
      method: 'PUT',
      body: { item: 'book' },
      headers: { 'content-type': 'application/json', 'x-request-id': 'abc', 'X-Multi': 'one', accept: 'text/plain' },
    });
    expect(res.status).toBe(200);
    const seen = res.json;
    expect(seen.method).toBe('PUT');
    expect(seen.url).toBe(`${s.url}/t/shop/orders/new?id=7&x=%20y`);
    expect(seen.body).toEqual({ item: 'book' });
    expect(seen.gwHeaders['X-Request-Id']).toEqual(['abc']);
    expect(seen.gwHeaders['X-Multi']).toEqual(['one']);
    expect(seen.gwHeaders['Accept']).toEqual(['text/plain']);
    expect(seen.headers['Content-Type']).toEqual(['application/json']);
    expect(seen.headers['Fn-Http-Method']).toEqual(['PUT']);
    expect(seen.headers['Fn-Intent']).toEqual(['httprequest']);
    // Hop-by-hop headers stay on their hop.
    expect(seen.gwHeaders['Connection']).toBeUndefined();
    expect(seen.headers['Connection']).toBeUndefined();
  });

  it("turn Fn-Http-Status and Fn-Http-H-* into the answer's status and headers, and drop the rest", async () => {
    const res = await s.call('/t/shop/orders/new', {
      body: { status: 201, headers: { 'X-Order': '42', Location: '/orders/42' }, contentType: 'text/plain' },
      headers: { 'content-type': 'application/json' },
    });
    expect(res.status).toBe(201);
    expect(res.headers.get('x-order')).toBe('42');
    expect(res.headers.get('location')).toBe('/orders/42');
    expect(res.headers.get('content-type')).toBe('text/plain');
    expect(res.headers.get('fn-call-id')).toMatch(/^[0-9A-Z]{26}$/);
    expect(res.headers.get('fn-fdk-version')).toBeNull();
    expect(res.headers.get('fn-http-status')).toBeNull();
  });

  it('serve GET without a body and a trigger on the app root', async () => {
    const res = await s.call('/t/shop', { method: 'GET' });
    expect(res.status).toBe(200);
    expect(res.json.method).toBe('GET');
    expect(res.json.body).toBe('');
    const sub = await s.call('/t/shop/orders/new', { method: 'GET' });
    expect(sub.json.url).toBe(`${s.url}/t/shop/orders/new`);
  });

  it("answer 404 in Fn's words for an unknown app or source", async () => {
    const noApp = await s.call('/t/nope/orders/new', { method: 'GET' });
    expect(noApp.status).toBe(404);
    expect(noApp.json).toEqual({ message: 'App not found' });
    const noTrigger = await s.call('/t/shop/orders/old', { method: 'GET' });
    expect(noTrigger.status).toBe(404);
    expect(noTrigger.json).toEqual({ message: 'Trigger not found' });
    expect(noTrigger.headers.get('fn-call-id')).toMatch(/^[0-9A-Z]{26}$/);
  });

  it('follow API changes at once: a moved source answers where it moved to', async () => {
    const t = await s.post('/v2/triggers', { app_id: app.id, fn_id: fn.id, name: 'moving', type: 'http', source: '/here' });
    expect((await s.call('/t/shop/here', { method: 'GET' })).status).toBe(200);
    await s.call(`/v2/triggers/${t.id}`, { method: 'PUT', body: { source: '/there' }, headers: { 'content-type': 'application/json' } });
    expect((await s.call('/t/shop/here', { method: 'GET' })).status).toBe(404);
    expect((await s.call('/t/shop/there', { method: 'GET' })).status).toBe(200);
  });
});
