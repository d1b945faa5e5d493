/**
 * The HTTP server's own bounds on how long a client may take to send a
 * request (FNTS_REQUEST_HEADERS_TIMEOUT_MSECS, FNTS_REQUEST_TIMEOUT_MSECS):
 * a stalled upload is answered 408 in Fn's JSON and its socket closed within
 * the bound, on the API and the invoke paths alike; a request that has fully
 * arrived is never cut, however long its answer takes.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { compileConfig, ConfigError } from '../../src/config/index.js';
import { probeImage } from '../support/functions.js';
import { exchange, listenApi, type ListeningApi, type RawAnswer } from '../support/raw.js';
import { startTestServer, type TestServer } from '../support/server.js';
import { TEST_ADMIN_TOKEN } from '../support/auth.js';

/** The test token's header line, for requests written byte by byte. */
const AUTH = `Authorization: Bearer ${TEST_ADMIN_TOKEN}\r\n`;

const HEADERS_MS = 300;
const REQUEST_MS = 600;
const BOUNDS = { FNTS_REQUEST_HEADERS_TIMEOUT_MSECS: String(HEADERS_MS), FNTS_REQUEST_TIMEOUT_MSECS: String(REQUEST_MS) };
// Scheduling on a busy two-core machine; the old behaviour (Node's defaults) takes 300 s and more.
const SLACK_MS = 1500;

function expectTimedOut(res: RawAnswer, boundMs: number): void {
  expect({ status: res.status, json: res.json }, res.raw).toEqual({ status: 408, json: { message: 'Timed out receiving the request' } });
  expect(res.headers['content-type']).toMatch(/^application\/json/);
  expect(res.closedAfterMs).toBeLessThan(boundMs + SLACK_MS);
}

describe('request timeout settings', () => {
  it('default to 10 s for the headers and 30 s for the whole request', () => {
    const config = compileConfig({});
    expect([config.requestHeadersTimeoutMs, config.requestTimeoutMs]).toEqual([10_000, 30_000]);
  });

  it.each([
    [{ FNTS_REQUEST_TIMEOUT_MSECS: 'soon' }, 'FNTS_REQUEST_TIMEOUT_MSECS=soon is not a whole number of milliseconds; use a value from 100 to 3600000'],
    [{ FNTS_REQUEST_TIMEOUT_MSECS: '0' }, 'FNTS_REQUEST_TIMEOUT_MSECS=0 is out of range; use a value from 100 to 3600000 milliseconds'],
    [{ FNTS_REQUEST_HEADERS_TIMEOUT_MSECS: '99' }, 'FNTS_REQUEST_HEADERS_TIMEOUT_MSECS=99 is out of range; use a value from 100 to 3600000 milliseconds'],
    [
      { FNTS_REQUEST_HEADERS_TIMEOUT_MSECS: '20000', FNTS_REQUEST_TIMEOUT_MSECS: '15000' },
      'FNTS_REQUEST_HEADERS_TIMEOUT_MSECS=20000 is longer than FNTS_REQUEST_TIMEOUT_MSECS=15000; the headers are part of the request, so use at most 15000',
    ],
  ])('refuses %j at startup with a message', (env, message) => {
    expect(() => compileConfig(env)).toThrow(new ConfigError(message));
  });
});

describe('a stalled request on the API', () => {
  let api: ListeningApi;
  beforeAll(async () => {
    api = await listenApi(BOUNDS);
  });
  afterAll(async () => {
    await api.close();
  });

  it('is answered 408 and closed within the request timeout when its body stalls', async () => {
    const res = await exchange(api.port, [`POST /v2/apps HTTP/1.1\r\nHost: x\r\n${AUTH}Content-Type: application/json\r\nContent-Length: 100\r\n\r\n`, '{"name":"sta'], REQUEST_MS + 10_000);
    expectTimedOut(res, REQUEST_MS);
    expect((await api.datastore.listApps({ perPage: 10 })).items).toEqual([]);
  });

  it('is answered 408 within the headers timeout when its headers stall', async () => {
    const res = await exchange(api.port, [`POST /v2/apps HTTP/1.1\r\nHost: x\r\n${AUTH}Content-Le`], HEADERS_MS + 10_000);
    expectTimedOut(res, HEADERS_MS);
  });

  it('is answered 408 when a chunked body trickles past the request timeout', async () => {
    const res = await exchange(api.port, [`POST /v2/apps HTTP/1.1\r\nHost: x\r\n${AUTH}Transfer-Encoding: chunked\r\n\r\n`, '5\r\n{"nam\r\n'], REQUEST_MS + 10_000);
    expectTimedOut(res, REQUEST_MS);
  });
});

describe('a stalled request on the invoke path', () => {
  let fnts: TestServer;
  let fn: any;
  beforeAll(async () => {
    fnts = await startTestServer(BOUNDS);
    fn = await fnts.fn(await fnts.app(), await probeImage());
  });
  afterAll(async () => {
    await fnts.close();
  });

  it('is answered 408 and closed within the request timeout', async () => {
    const res = await exchange(fnts.server.port, [`POST /invoke/${fn.id} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n`, '{"sle'], REQUEST_MS + 10_000);
    expectTimedOut(res, REQUEST_MS);
  });

  it('does not cut a call whose request has arrived, however long the function takes', async () => {
    const res = await fnts.invoke(fn.id, { sleep: 3 * REQUEST_MS });
    expect(res.status, res.text).toBe(200);
    expect(res.json.body).toEqual({ sleep: 3 * REQUEST_MS });
  });
});
