/**
 * Requests Node's HTTP parser refuses before any handler runs, over real
 * sockets: every answer is Fn's `{"message": ...}` JSON with Fn's status
 * (checked against fnserver 0.3.753, whose net/http answers the same
 * statuses in plain text), on the API and on the invoke paths alike.
 */
import { once } from 'node:events';
import { connect } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { exchange, listenApi, type ListeningApi, type LogLine, type RawAnswer } from '../support/raw.js';
import { startTestServer, type TestServer } from '../support/server.js';
import { eventually } from '../support/wait.js';
import { TEST_ADMIN_TOKEN } from '../support/auth.js';

/** The test token's header line, for requests written byte by byte. */
const AUTH = `Authorization: Bearer ${TEST_ADMIN_TOKEN}\r\n`;

function expectFnAnswer(res: RawAnswer, status: number, message: string): void {
  expect({ status: res.status, json: res.json }, res.raw.slice(0, 300)).toEqual({ status, json: { message } });
  expect(res.headers['content-type']).toMatch(/^application\/json/);
  expect(res.headers['connection']).toBe('close');
}

describe('client errors on the API', () => {
  let api: ListeningApi;
  beforeAll(async () => {
    api = await listenApi();
  });
  afterAll(async () => {
    await api.close();
  });

  it('answers a body with broken chunked framing 400 Invalid JSON, as Fn, and creates nothing', async () => {
    const res = await exchange(api.port, [`POST /v2/apps HTTP/1.1\r\nHost: x\r\n${AUTH}Transfer-Encoding: chunked\r\nContent-Type: application/json\r\n\r\n`, 'zz\r\n{"name":"q"}\r\n0\r\n\r\n']);
    expectFnAnswer(res, 400, 'Invalid JSON');
    expect((await api.datastore.listApps({ perPage: 10 })).items).toEqual([]);
  });

  it('answers oversized headers 431 in JSON', async () => {
    const res = await exchange(api.port, [`GET /v2/apps HTTP/1.1\r\nHost: x\r\n${AUTH}X-Big: ${'a'.repeat(17 * 1024)}\r\n\r\n`]);
    expectFnAnswer(res, 431, 'Request header fields too large');
  });

  it('answers a method Node cannot parse as Fn routes it: 405 on an API path, 404 elsewhere', async () => {
    expectFnAnswer(await exchange(api.port, ['FOO /v2/apps?x=1 HTTP/1.1\r\nHost: x\r\n\r\n']), 405, 'Method not allowed: FOO /v2/apps');
    expectFnAnswer(await exchange(api.port, ['FOO /v2/fns/F1 HTTP/1.1\r\nHost: x\r\n\r\n']), 405, 'Method not allowed: FOO /v2/fns/F1');
    expectFnAnswer(await exchange(api.port, ['FOO / HTTP/1.1\r\nHost: x\r\n\r\n']), 405, 'Method not allowed: FOO /');
    expectFnAnswer(await exchange(api.port, ['FOO /v3/x HTTP/1.1\r\nHost: x\r\n\r\n']), 404, 'Path not found: FOO /v3/x');
  });

  it('answers a request line that is not HTTP 400, and an unknown HTTP version 505, in JSON', async () => {
    expectFnAnswer(await exchange(api.port, ['hello world\r\n\r\n']), 400, 'Malformed HTTP request');
    expectFnAnswer(await exchange(api.port, ['F@O /v2/apps HTTP/1.1\r\nHost: x\r\n\r\n']), 400, 'Malformed HTTP request');
    expectFnAnswer(await exchange(api.port, [`POST /v2/apps HTTP/1.1\r\nHost: x\r\n${AUTH}Content-Length: abc\r\n\r\n`]), 400, 'Malformed HTTP request');
    expectFnAnswer(await exchange(api.port, [`GET /v2/apps HTTP/9.9\r\nHost: x\r\n${AUTH}\r\n`]), 505, 'HTTP version not supported');
  });

  it('logs a client that hangs up mid-upload as its doing, not as an internal error', async () => {
    const before = api.logs.length;
    // Half the declared body, then the client closes its side.
    const socket = connect({ port: api.port, host: '127.0.0.1' });
    socket.on('error', () => undefined);
    socket.once('connect', () => socket.end(`POST /v2/apps HTTP/1.1\r\nHost: x\r\n${AUTH}Content-Type: application/json\r\nContent-Length: 100\r\n\r\n{"name":`));
    socket.resume();
    await once(socket, 'close');
    const logged = (): LogLine | undefined => api.logs.slice(before).find((l) => l.msg === 'connection closed before the request body was read');
    await eventually(() => logged() !== undefined, 5000, 20);
    expect(logged()).toMatchObject({ level: 20, method: 'POST', url: '/v2/apps' });
    expect(api.logs.slice(before).filter((l) => l.level >= 40)).toEqual([]);
  });
});

describe('client errors on the invoke paths (same server, before Fastify)', () => {
  let fnts: TestServer;
  let fnId: string;
  beforeAll(async () => {
    fnts = await startTestServer();
    const app = await fnts.app({ name: 'ce' });
    // Never run: every request below fails before a call starts.
    fnId = (await fnts.fn(app, 'fnts-test/none:0')).id;
  });
  afterAll(async () => {
    await fnts.close();
  });

  const port = (): number => fnts.server.port;

  it('answers broken chunked framing 400 in JSON', async () => {
    const res = await exchange(port(), [`POST /invoke/${fnId} HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n`, 'zz\r\nabc\r\n0\r\n\r\n']);
    expectFnAnswer(res, 400, 'Malformed HTTP request');
  });

  it('answers oversized headers 431 in JSON', async () => {
    expectFnAnswer(await exchange(port(), [`POST /invoke/${fnId} HTTP/1.1\r\nHost: x\r\nX-Big: ${'a'.repeat(17 * 1024)}\r\n\r\n`]), 431, 'Request header fields too large');
  });

  it('answers a method Node cannot parse with 405 on /invoke and /t, as Fn', async () => {
    expectFnAnswer(await exchange(port(), [`FOO /invoke/${fnId} HTTP/1.1\r\nHost: x\r\n\r\n`]), 405, `Method not allowed: FOO /invoke/${fnId}`);
    expectFnAnswer(await exchange(port(), ['FOO /t/ce/hello HTTP/1.1\r\nHost: x\r\n\r\n']), 405, 'Method not allowed: FOO /t/ce/hello');
  });
});
