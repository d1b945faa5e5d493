import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterEach, describe, expect, it } from 'vitest';
import { digestOf, newToken } from '../auth/index.js';
import { RemoteInvokeGuard } from './invoke-auth.js';

const ADMIN = 'an-operators-own-admin-token-0123456789';
const JWT = 'Bearer eyJhbGciOiJIUzI1NiJ9.e30.sig';

/** An API node answering GET /v2/runner/tokens/unshaped with whatever `answer` says at the time. */
async function apiNode(answer: () => { status: number; body: unknown }): Promise<{ url: string; asked: () => number; server: Server }> {
  let asked = 0;
  const server = createServer((req, res) => {
    if (req.url !== '/v2/runner/tokens/unshaped' || req.method !== 'GET') {
      res.writeHead(500).end();
      return;
    }
    asked++;
    const { status, body } = answer();
    res.writeHead(status, { 'content-type': 'application/json' }).end(JSON.stringify(body));
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return { url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`, asked: () => asked, server };
}

async function until(what: () => boolean): Promise<void> {
  for (let i = 0; i < 200 && !what(); i++) await new Promise((r) => setTimeout(r, 10));
  expect(what()).toBe(true);
}

describe("the LB's invoke guard", () => {
  const closing: Array<() => Promise<unknown>> = [];
  afterEach(async () => {
    for (const c of closing.splice(0)) await c();
  });

  it("tells a token of fnts's shape (kept from functions) from a function's own Basic header at once, asking nobody", () => {
    // An API URL nothing answers at, never started: carriesToken must not ask it.
    const guard = new RemoteInvokeGuard('http://127.0.0.1:1', undefined);
    expect(guard.carriesToken(`Bearer ${newToken().token}`)).toBe(true);
    expect(guard.carriesToken(`BEARER   ${newToken().token}`)).toBe(true);
    expect(guard.carriesToken('Basic YTpi')).toBe(false);
  });

  it('keeps every other Bearer header from functions until the API node has said which of its tokens no shape tells (its FNTS_ADMIN_TOKEN must not leak meanwhile)', () => {
    const guard = new RemoteInvokeGuard('http://127.0.0.1:1', undefined);
    expect(guard.carriesToken(`Bearer ${ADMIN}`)).toBe(true);
    expect(guard.carriesToken(JWT)).toBe(true);
  });

  it("withholds the API node's admin token of the operator's shape, and lets a function's own bearer tokens through, once the digests are read", async () => {
    const api = await apiNode(() => ({ status: 200, body: { digests: [digestOf(ADMIN)] } }));
    closing.push(() => new Promise((r) => api.server.close(r)));
    const guard = new RemoteInvokeGuard(api.url, undefined);
    guard.start(20);
    closing.push(() => guard.close());
    await until(() => !guard.carriesToken(JWT));
    expect(guard.carriesToken(`Bearer ${ADMIN}`)).toBe(true);
    expect(guard.carriesToken(`bearer  ${ADMIN}`)).toBe(true);
    expect(guard.carriesToken(`Bearer ${ADMIN}x`)).toBe(false);
    expect(guard.carriesToken(`Bearer ${newToken().token}`)).toBe(true);
    expect(guard.carriesToken('Basic YTpi')).toBe(false);
    // Read again and again while it runs; never again once closed.
    await until(() => api.asked() >= 3);
    await guard.close();
    const asked = api.asked();
    await new Promise((r) => setTimeout(r, 80));
    expect(api.asked()).toBe(asked);
  });

  it('keeps the last list while the API node fails, takes a new one when it answers, and withholds nothing more from an API node without the endpoint', async () => {
    const old = 'the-admin-token-before-a-restart-0123456789';
    let answer: { status: number; body: unknown } = { status: 200, body: { digests: [digestOf(old)] } };
    const api = await apiNode(() => answer);
    closing.push(() => new Promise((r) => api.server.close(r)));
    const guard = new RemoteInvokeGuard(api.url, undefined);
    guard.start(20, 20);
    closing.push(() => guard.close());
    await until(() => !guard.carriesToken(JWT));
    expect(guard.carriesToken(`Bearer ${old}`)).toBe(true);
    // Failing, or answering what no fnts answers: the last list stays.
    for (const bad of [
      { status: 503, body: { message: 'Service unavailable' } },
      { status: 200, body: { digests: ['not-a-digest'] } },
      { status: 200, body: { digests: 'x' } },
    ]) {
      answer = bad;
      const at = api.asked();
      await until(() => api.asked() >= at + 2);
      expect(guard.carriesToken(`Bearer ${old}`)).toBe(true);
      expect(guard.carriesToken(JWT)).toBe(false);
    }
    // The API node restarted with another admin token.
    answer = { status: 200, body: { digests: [digestOf(ADMIN)] } };
    await until(() => guard.carriesToken(`Bearer ${ADMIN}`));
    expect(guard.carriesToken(`Bearer ${old}`)).toBe(false);
    // Fn's own API node, or one with FNTS_AUTH=off: no such tokens.
    answer = { status: 404, body: { message: 'Not found' } };
    await until(() => !guard.carriesToken(`Bearer ${ADMIN}`));
    expect(guard.carriesToken(`Bearer ${newToken().token}`)).toBe(true);
  });
});
