/**
 * invoke-auth (fnts.io/invoke-auth: "token" on an app or fn), on a real
 * server with real containers: calls need a token with the invoke right
 * for the app, refused before the body is read and before anything runs;
 * the token does not reach the function; other fns stay public, as in Fn.
 */
import { connect } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { bearer } from '../support/auth.js';
import { probeImage } from '../support/functions.js';
import { startTestServer, type TestServer } from '../support/server.js';

describe('invoke-auth', () => {
  let s: TestServer;
  let guardedFn: any;
  let publicFn: any;
  let appWideFn: any;
  const tokens: Record<string, string> = {};

  beforeAll(async () => {
    s = await startTestServer();
    const image = await probeImage();
    const app = await s.app({ name: 'shop' });
    guardedFn = await s.fn(app, image, { name: 'orders', annotations: { 'fnts.io/invoke-auth': 'token' } });
    publicFn = await s.fn(app, image, { name: 'status' });
    const locked = await s.app({ name: 'locked', annotations: { 'fnts.io/invoke-auth': 'token' } });
    appWideFn = await s.fn(locked, image, { name: 'any' });
    for (const [name, body] of Object.entries({
      invoker: { role: 'invoker' },
      developer: { role: 'developer' },
      viewer: { role: 'viewer' },
      otherApp: { role: 'invoker', apps: ['locked'] },
    })) {
      tokens[name] = (await s.post('/v2/tokens', { name, ...body })).token;
    }
  });
  afterAll(() => s?.close());

  it('takes calls from invoker and developer tokens of the app; the token does not reach the function', async () => {
    for (const who of ['invoker', 'developer']) {
      const res = await s.invoke(guardedFn.id, {}, bearer(tokens[who]));
      expect(res.status, res.text).toBe(200);
      expect(Object.keys(res.json.headers).map((h) => h.toLowerCase())).not.toContain('authorization');
    }
  });

  it('refuses no token and a wrong token with 401, a viewer or another app’s token with 403, before anything runs', async () => {
    const before = (await s.containers()).length;
    for (const [headers, status, message] of [
      [{}, 401, "Authentication required: send 'Authorization: Bearer <token>' (the fn CLI sends FN_TOKEN)"],
      [bearer('fnts_0123456789abcdef_AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA'), 401, 'Invalid token: it is unknown, revoked or expired'],
      [{ authorization: 'Basic YTpi' }, 401, 'Invalid token: it is unknown, revoked or expired'],
      [bearer(tokens['viewer']), 403, 'Forbidden: this token may not use this app'],
      [bearer(tokens['otherApp']), 403, 'Forbidden: this token may not use this app'],
    ] as const) {
      const res = await s.invoke(guardedFn.id, {}, headers as Record<string, string>);
      expect({ status: res.status, message: res.json?.message }).toEqual({ status, message });
      if (status === 401) expect(res.headers.get('www-authenticate')).toMatch(/^Bearer/);
      expect(res.headers.get('fn-call-id')).toBeTruthy();
    }
    // Detached calls too: nothing is queued for a caller without a token.
    const detached = await s.invoke(guardedFn.id, {}, { 'Fn-Invoke-Type': 'detached' });
    expect(detached.status).toBe(401);
    expect((await s.containers()).length).toBe(before);
    expect((await s.call(`/v2/fns/${guardedFn.id}/calls`, { method: 'GET' })).json.items.filter((c: any) => c.status !== 'success')).toEqual([]);
  });

  it('answers 401 before reading the body: a caller without a token is refused with its upload still pending', async () => {
    const { port } = new URL(s.url);
    const answer = await new Promise<string>((resolve, reject) => {
      const socket = connect(Number(port), '127.0.0.1');
      let text = '';
      socket.on('data', (b) => {
        text += b.toString();
        if (text.includes('\r\n\r\n')) {
          resolve(text);
          socket.destroy();
        }
      });
      socket.on('error', reject);
      // Declares 50 MB and sends none of it: the answer must not wait for it.
      socket.write(`POST /invoke/${guardedFn.id} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 52428800\r\n\r\n`);
    });
    expect(answer).toMatch(/^HTTP\/1\.1 401/);
  });

  it('applies an app’s annotation to each of its fns, and leaves fns without it public', async () => {
    expect((await s.invoke(appWideFn.id, {})).status).toBe(401);
    expect((await s.invoke(appWideFn.id, {}, bearer(tokens['otherApp']))).status).toBe(200);
    const open = await s.invoke(publicFn.id, {});
    expect(open.status).toBe(200);
  });

  it("a public fn never gets its caller's fnts token (a script may send its token on every request), but gets the function's own Authorization schemes", async () => {
    const seen = async (authorization: string): Promise<string | undefined> => {
      const res = await s.invoke(publicFn.id, {}, { authorization });
      expect(res.status, res.text).toBe(200);
      const headers = res.json.headers as Record<string, string | string[]>;
      const found = Object.entries(headers).find(([name]) => name.toLowerCase() === 'authorization')?.[1];
      return Array.isArray(found) ? found[0] : found;
    };
    // Tokens of fnts: made by it, shaped fnts_<id>_<secret>, even unknown ones; and the operator's FNTS_ADMIN_TOKEN, of any shape.
    expect(await seen(`Bearer ${tokens['invoker']}`)).toBeUndefined();
    expect(await seen(`bearer  ${tokens['viewer']}`)).toBeUndefined();
    expect(await seen('Bearer fnts_0123456789abcdef_AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA')).toBeUndefined();
    expect(await seen(bearer()['authorization']!)).toBeUndefined();
    // The function's own: they reach it, as in Fn.
    expect(await seen('Basic YTpi')).toBe('Basic YTpi');
    expect(await seen('Bearer eyJhbGciOiJIUzI1NiJ9.e30.sig')).toBe('Bearer eyJhbGciOiJIUzI1NiJ9.e30.sig');
  });

  it('refuses an annotation value other than "token", so a typo does not leave a fn open by surprise', async () => {
    const app = await s.app();
    for (const value of ['Token', 'yes', true, 1]) {
      const res = await s.call('/v2/fns', {
        body: { app_id: app.id, name: 'typo', image: 'fnproject/hello', annotations: { 'fnts.io/invoke-auth': value } },
        headers: { 'content-type': 'application/json' },
      });
      expect({ status: res.status, message: res.json.message }).toEqual({ status: 400, message: 'Invalid annotation fnts.io/invoke-auth, it must be "token" (calls need a token) or be removed' });
    }
    const res = await s.call(`/v2/apps/${app.id}`, { method: 'PUT', body: { annotations: { 'fnts.io/invoke-auth': 'on' } }, headers: { 'content-type': 'application/json' } });
    expect(res.status).toBe(400);
  });

  it('a token revoked stops invoking at once', async () => {
    const { id, token } = await s.post('/v2/tokens', { name: 'once', role: 'invoker' });
    expect((await s.invoke(guardedFn.id, {}, bearer(token))).status).toBe(200);
    expect((await s.call(`/v2/tokens/${id}`, { method: 'DELETE' })).status).toBe(204);
    expect((await s.invoke(guardedFn.id, {}, bearer(token))).status).toBe(401);
  });
});
