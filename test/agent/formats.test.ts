import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { containersOfFn } from '../support/containers.js';
import { formatImages } from '../support/functions.js';
import { startTestServer, type TestServer } from '../support/server.js';
import { eventually } from '../support/wait.js';

let s: TestServer;
let app: any;
const images: Record<string, string> = {};

beforeAll(async () => {
  const [cold, json, cloudevent, http] = await Promise.all([formatImages.cold(), formatImages.json(), formatImages.cloudevent(), formatImages.http()]);
  Object.assign(images, { cold, json, cloudevent, http });
  s = await startTestServer();
  app = await s.app({ name: 'formats' });
});
afterAll(async () => {
  await s?.close();
});

async function withTrigger(fn: any, source: string): Promise<void> {
  await s.post('/v2/triggers', { app_id: app.id, fn_id: fn.id, name: source.slice(1), type: 'http', source });
}

describe('the json format', () => {
  it("sends one JSON object per call and answers with the function's body, status and headers, hot", async () => {
    const fn = await s.fn(app, images['json']!, { format: 'json' });
    await withTrigger(fn, '/json');
    const res = await s.call('/t/formats/json?q=1', {
      method: 'PUT',
      body: { status: 201, headers: { 'X-Made': ['yes'] } },
      headers: { 'content-type': 'application/json', 'x-caller': 'me' },
    });
    expect(res.status).toBe(201);
    expect(res.headers.get('x-made')).toBe('yes');
    expect(res.headers.get('content-type')).toBe('application/json');
    const got = res.json.got;
    expect(got.call_id).toBe(res.headers.get('fn-call-id'));
    expect(got.content_type).toBe('application/json');
    expect(got.deadline).toMatch(/^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$/);
    expect(JSON.parse(got.body)).toEqual({ status: 201, headers: { 'X-Made': ['yes'] } });
    expect(got.protocol).toMatchObject({ type: 'http', method: 'PUT', request_url: `${s.url}/t/formats/json?q=1` });
    expect(got.protocol.headers['X-Caller']).toEqual(['me']);

    const again = await s.invoke(fn.id, {});
    expect(again.status).toBe(200);
    expect(again.json.host).toBe(res.json.host);
    expect(again.json.n).toBe(2);
  });

  it("never lets a timed-out call's answer reach the next call", async () => {
    const fn = await s.fn(app, images['json']!, { format: 'json', timeout: 1 });
    const first = await s.invoke(fn.id, {});
    const late = await s.invoke(fn.id, { sleep: 2500 });
    expect(late.status).toBe(504);
    const next = await s.invoke(fn.id, { mark: 'next' });
    expect(next.status).toBe(200);
    expect(next.json.got.call_id).toBe(next.headers.get('fn-call-id'));
    expect(JSON.parse(next.json.got.body)).toEqual({ mark: 'next' });
    expect(next.json.host).not.toBe(first.json.host);
  });

  it('replaces a container that writes output nobody asked for', async () => {
    const fn = await s.fn(app, images['json']!, { format: 'json' });
    const first = await s.invoke(fn.id, { garbage: true });
    expect(first.status).toBe(200);
    const next = await s.invoke(fn.id, { mark: 2 });
    expect(next.status).toBe(200);
    expect(JSON.parse(next.json.got.body)).toEqual({ mark: 2 });
    expect(next.json.host).not.toBe(first.json.host);
  });

  it('answers 502 when the container dies mid-call, and serves the next call fresh', async () => {
    const fn = await s.fn(app, images['json']!, { format: 'json' });
    const dead = await s.invoke(fn.id, { exit: 4 });
    expect(dead.status).toBe(502);
    expect(dead.json.message).toBe('function failed: container exited with code 4');
    expect((await s.invoke(fn.id, {})).status).toBe(200);
  });
});

describe('the cloudevent format', () => {
  it("wraps the call as a CloudEvent and answers with the event's data", async () => {
    const fn = await s.fn(app, images['cloudevent']!, { format: 'cloudevent' });
    const res = await s.invoke(fn.id, { hello: 'event' });
    expect(res.status).toBe(202);
    expect(res.headers.get('x-event')).toBe(res.headers.get('fn-call-id'));
    const ev = res.json.seen;
    expect(ev).toMatchObject({ cloudEventsVersion: '0.1', eventID: res.headers.get('fn-call-id'), contentType: 'application/json', data: { hello: 'event' } });
    expect(ev.extensions.deadline).toMatch(/Z$/);
    expect(ev.extensions.protocol).toMatchObject({ type: 'http', method: 'POST' });
    expect((await s.invoke(fn.id, {})).json.n).toBe(2);
  });
});

describe('the http format', () => {
  it("writes the caller's request as HTTP/1.1 to stdin with Fn's headers, and answers with the HTTP response from stdout", async () => {
    const fn = await s.fn(app, images['http']!, { format: 'http' });
    await withTrigger(fn, '/http');
    const res = await s.call('/t/formats/http?x=1', { body: 'plain body', headers: { 'content-type': 'text/plain', 'x-caller': 'me' } });
    expect(res.status).toBe(201);
    expect(res.headers.get('x-seen')).toBe('yes');
    const seen = res.json;
    expect(seen.method).toBe('POST');
    expect(seen.target).toBe('/t/formats/http?x=1');
    expect(seen.body).toBe('plain body');
    expect(seen.headers['Content-Length']).toBe('10');
    expect(seen.headers['x-caller']).toBe('me');
    expect(seen.headers['Fn_call_id']).toBe(res.headers.get('fn-call-id'));
    expect(seen.headers['Fn_method']).toBe('POST');
    expect(seen.headers['Fn_request_url']).toBe(`${s.url}/t/formats/http?x=1`);
    expect(seen.headers['Fn_deadline']).toMatch(/Z$/);
    const again = await s.call('/t/formats/http', { method: 'GET' });
    expect(again.json).toMatchObject({ n: 2, host: seen.host, method: 'GET', body: '' });
  });
});

describe('the default (cold) format', () => {
  it('runs one container per call with the request in its environment and stdin, then removes it', async () => {
    const fn = await s.fn(app, images['cold']!, { format: 'default', config: { CFG: 'x' } });
    await withTrigger(fn, '/cold');
    const res = await s.call('/t/formats/cold?a=b', { body: '{"in":1}', headers: { 'content-type': 'application/json', 'x-custom-thing': 'v1' } });
    expect(res.status).toBe(200);
    const env = res.json.env;
    expect(res.json.body).toBe('{"in":1}');
    expect(env).toMatchObject({
      FN_FORMAT: 'default',
      FN_METHOD: 'POST',
      FN_REQUEST_URL: `${s.url}/t/formats/cold?a=b`,
      FN_CALL_ID: res.headers.get('fn-call-id'),
      FN_HEADER_X_CUSTOM_THING: 'v1',
      FN_HEADER_CONTENT_TYPE: 'application/json',
      FN_APP_NAME: 'formats',
    });
    expect(new Date(env.FN_DEADLINE).getTime()).toBeGreaterThan(Date.now());
    expect(await eventually(async () => (await containersOfFn(fn.id)).length === 0, 3000)).toBe(true);
    const second = await s.invoke(fn.id, {});
    expect(second.json.host).toBeDefined();
    expect(await eventually(async () => (await containersOfFn(fn.id)).length === 0, 3000)).toBe(true);
  });

  it('answers 502 when the function exits non-zero and 504 past its timeout, removing the container each time', async () => {
    // The timeout covers the container's start (as in Fn): 3 s, since a start took over a second on a loaded machine
    // (the suite's first minutes, beside the type check and lint) and the call that exits 9 answered 504.
    const fn = await s.fn(app, images['cold']!, { format: 'default', timeout: 3 });
    const failed = await s.invoke(fn.id, { exit: 9 });
    expect(failed.status).toBe(502);
    expect(failed.json).toEqual({ message: 'function failed: container exited with code 9' });
    const slow = await s.invoke(fn.id, { sleep: 10_000 });
    expect(slow.status).toBe(504);
    expect(slow.json).toEqual({ message: 'Timed out' });
    // At its timeout, well before the function would have answered.
    expect(slow.ms).toBeLessThan(5000);
    expect(await eventually(async () => (await containersOfFn(fn.id)).length === 0, 3000)).toBe(true);
  });
});
