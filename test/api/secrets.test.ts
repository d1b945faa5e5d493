/**
 * The secrets API on a real server (its SQLite file, its key file): set,
 * list and delete an app's and a fn's secrets; values are taken, never
 * shown; names are config keys that can be file names; values are strings
 * of at most 64 KiB; unknown owners and secrets answer Fn's 404s, other
 * methods Fn's 405. The key file is made at the first start, only its
 * owner can read it, and a server whose key is not the one the secrets
 * were stored with refuses to start, saying what to do.
 */
import { randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync, statSync, unlinkSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { compileConfig } from '../../src/config/index.js';
import { startServer } from '../../src/roles/index.js';
import { exchange } from '../support/raw.js';
import { startTestServer, type Answer, type TestServer } from '../support/server.js';
import { testRunTag } from '../support/tag.js';
import { TEST_ADMIN_TOKEN } from '../support/auth.js';

let s: TestServer;
beforeAll(async () => {
  s = await startTestServer();
});
afterAll(async () => {
  await s?.close();
});

const put = (path: string, body: unknown): Promise<Answer> => s.call(path, { method: 'PUT', body, headers: { 'content-type': 'application/json' } });
const get = (path: string): Promise<Answer> => s.call(path, { method: 'GET' });
const del = (path: string): Promise<Answer> => s.call(path, { method: 'DELETE' });

async function expectError(res: Promise<Answer>, status: number, message: string): Promise<void> {
  const r = await res;
  expect({ status: r.status, body: r.json }).toEqual({ status, body: { message } });
  expect(r.headers.get('content-type')).toMatch(/^application\/json/);
}

const TIME = /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$/;

describe.each(['apps', 'fns'] as const)('the secrets of %s', (kind) => {
  let owner: string;
  beforeEach(async () => {
    const app = await s.app();
    owner = kind === 'apps' ? `/v2/apps/${app.id}` : `/v2/fns/${(await s.fn(app, 'fnproject/hello')).id}`;
  });

  it('are set, listed by name and times without their values, written again and deleted', async () => {
    const value = `v-${randomBytes(8).toString('hex')}`;
    const set = await put(`${owner}/secrets/DB_PASSWORD`, { value });
    expect(set.status, set.text).toBe(200);
    expect(set.json).toEqual({ name: 'DB_PASSWORD', created_at: expect.stringMatching(TIME), updated_at: set.json.created_at });
    await put(`${owner}/secrets/API_KEY`, { value: 'k' });

    const list = await get(`${owner}/secrets`);
    expect(list.status).toBe(200);
    expect(list.json).toEqual({ items: [{ name: 'API_KEY', created_at: expect.stringMatching(TIME), updated_at: expect.stringMatching(TIME) }, set.json] });
    expect(list.text).not.toContain(value);
    // Nor does the app or fn itself show them: Fn's fields only.
    const shown = await get(owner);
    expect(shown.text).not.toContain(value);
    expect(shown.text).not.toContain('DB_PASSWORD');
    expect(shown.json.config ?? {}).toEqual({});

    const again = await put(`${owner}/secrets/DB_PASSWORD`, { value: `${value}-2` });
    expect(again.json.created_at).toBe(set.json.created_at);
    expect(Date.parse(again.json.updated_at)).toBeGreaterThanOrEqual(Date.parse(set.json.updated_at));

    const gone = await del(`${owner}/secrets/DB_PASSWORD`);
    expect(gone.status).toBe(204);
    expect(gone.text).toBe('');
    expect((await get(`${owner}/secrets`)).json.items.map((i: any) => i.name)).toEqual(['API_KEY']);
    await expectError(del(`${owner}/secrets/DB_PASSWORD`), 404, 'Secret not found');
    await del(`${owner}/secrets/API_KEY`);
    expect((await get(`${owner}/secrets`)).json).toEqual({ items: [] });
  });

  it('take names as config keys that are file names, and say so otherwise', async () => {
    for (const name of ['db password.txt', 'ключ', '.hidden', 'a.b-c_d', 'x'.repeat(255)]) {
      const res = await put(`${owner}/secrets/${encodeURIComponent(name)}`, { value: 'v' });
      expect(res.status, `${name}: ${res.text}`).toBe(200);
      expect(res.json.name).toBe(name);
      await del(`${owner}/secrets/${encodeURIComponent(name)}`);
    }
    const invalid = `Invalid secret name, secret names are config keys that are also file names: non-empty, at most 255 bytes, without '=', '/' or NUL, and not '.' or '..'`;
    for (const name of ['a=b', 'a/b', 'nul\0', 'x'.repeat(256), 'é'.repeat(128)]) {
      await expectError(put(`${owner}/secrets/${encodeURIComponent(name)}`, { value: 'v' }), 400, invalid);
    }
    // Clients following the URL standard fold '.' and '..' segments away; a client that sends them as they are is refused.
    for (const name of ['..', '%2E%2E', '.', '%2e']) {
      const body = '{"value":"v"}';
      const res = await exchange(s.server.port, [
        `PUT ${owner}/secrets/${name} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${TEST_ADMIN_TOKEN}\r\nContent-Type: application/json\r\nContent-Length: ${body.length}\r\nConnection: close\r\n\r\n${body}`,
      ]);
      expect({ name, status: res.status, body: res.json }).toEqual({ name, status: 400, body: { message: invalid } });
    }
    expect((await get(`${owner}/secrets`)).json.items).toEqual([]);
  });

  it('take a value that is a string of at most 64 KiB, and say so otherwise', async () => {
    expect((await put(`${owner}/secrets/MAX`, { value: 'x'.repeat(65536) })).status).toBe(200);
    // Bytes of UTF-8, not characters: é is two.
    expect((await put(`${owner}/secrets/MAX`, { value: 'é'.repeat(32768) })).status).toBe(200);
    expect((await put(`${owner}/secrets/EMPTY`, { value: '' })).status).toBe(200);
    const tooLarge = 'Invalid secret value, secret values must be at most 65536 bytes';
    await expectError(put(`${owner}/secrets/BIG`, { value: 'x'.repeat(65537) }), 400, tooLarge);
    await expectError(put(`${owner}/secrets/BIG`, { value: 'é'.repeat(32769) }), 400, tooLarge);
    await expectError(put(`${owner}/secrets/K`, {}), 400, 'Missing secret value, send {"value": "..."}');
    await expectError(put(`${owner}/secrets/K`, { value: null }), 400, 'Missing secret value, send {"value": "..."}');
    await expectError(put(`${owner}/secrets/K`, { value: 42 }), 400, 'Invalid JSON');
    await expectError(put(`${owner}/secrets/K`, { value: { nested: 'x' } }), 400, 'Invalid JSON');
    await expectError(put(`${owner}/secrets/K`, 'not json'), 400, 'Invalid JSON');
    expect((await get(`${owner}/secrets`)).json.items.map((i: any) => i.name)).toEqual(['EMPTY', 'MAX']);
    await del(`${owner}/secrets/EMPTY`);
    await del(`${owner}/secrets/MAX`);
  });

  it('are at most 100 per owner', async () => {
    for (let i = 0; i < 100; i++) expect((await put(`${owner}/secrets/S${i}`, { value: 'v' })).status).toBe(200);
    await expectError(put(`${owner}/secrets/S100`, { value: 'v' }), 400, 'Invalid secret, an app or fn may hold at most 100 secrets of at most 262144 bytes in all');
    expect((await put(`${owner}/secrets/S0`, { value: 'rewritten' })).status).toBe(200);
    expect((await get(`${owner}/secrets`)).json.items).toHaveLength(100);
    for (let i = 0; i < 100; i++) await del(`${owner}/secrets/S${i}`);
  }, 60_000);

  it("answer other methods with Fn's 405", async () => {
    await expectError(s.call(`${owner}/secrets/K`, { method: 'POST', body: { value: 'v' } }), 405, `Method not allowed: POST ${owner}/secrets/K`);
    await expectError(s.call(`${owner}/secrets/K`, { method: 'GET' }), 405, `Method not allowed: GET ${owner}/secrets/K`);
    await expectError(s.call(`${owner}/secrets`, { method: 'PUT', body: { value: 'v' } }), 405, `Method not allowed: PUT ${owner}/secrets`);
    await expectError(s.call(`${owner}/secrets`, { method: 'DELETE' }), 405, `Method not allowed: DELETE ${owner}/secrets`);
    expect((await s.call(`${owner}/secrets`, { method: 'HEAD' })).status).toBe(405);
  });
});

describe('secrets of an app or fn that does not exist', () => {
  it.each([
    ['apps', 'App not found'],
    ['fns', 'Fn not found'],
  ])("answer Fn's 404 for %s", async (kind, message) => {
    await expectError(put(`/v2/${kind}/NOPE/secrets/K`, { value: 'v' }), 404, message);
    await expectError(get(`/v2/${kind}/NOPE/secrets`), 404, message);
    await expectError(del(`/v2/${kind}/NOPE/secrets/K`), 404, message);
  });

  it('go with their app and fn', async () => {
    const app = await s.app();
    const fn = await s.fn(app, 'fnproject/hello');
    await put(`/v2/apps/${app.id}/secrets/A`, { value: 'a' });
    await put(`/v2/fns/${fn.id}/secrets/F`, { value: 'f' });
    expect((await del(`/v2/fns/${fn.id}`)).status).toBe(204);
    await expectError(get(`/v2/fns/${fn.id}/secrets`), 404, 'Fn not found');
    expect((await get(`/v2/apps/${app.id}/secrets`)).json.items.map((i: any) => i.name)).toEqual(['A']);
    expect((await del(`/v2/apps/${app.id}`)).status).toBe(204);
    await expectError(get(`/v2/apps/${app.id}/secrets`), 404, 'App not found');
  });
});

describe('the key secrets are encrypted with', () => {
  const dir = mkdtempSync(join(tmpdir(), 'fnts-secret-key-'));
  afterAll(() => rmSync(dir, { recursive: true, force: true }));
  const env = { FN_DB_URL: `sqlite3://${join(dir, 'fn.db')}` };
  /** The start of a server on `dir` with `extra`, expected to fail: its message. */
  const refusal = async (extra: Record<string, string>): Promise<string> => {
    const config = compileConfig({ ...env, FN_PORT: '0', FN_LISTEN_HOST: '127.0.0.1', FN_LOG_LEVEL: 'silent', FN_IOFS_PATH: join(dir, 'iofs'), ...testRunTag(), ...extra });
    const started = await startServer(config).then(
      async (server) => {
        await server.close();
        return undefined;
      },
      (err: unknown) => (err as Error).message,
    );
    expect(started, 'the server started').toBeDefined();
    return started!;
  };

  it('is a file made at the first start beside the database, for its owner only, and kept across restarts', async () => {
    const first = await startTestServer(env);
    const app = await first.app();
    await first.call(`/v2/apps/${app.id}/secrets/K`, { method: 'PUT', body: { value: 'v' } });
    await first.close();
    const info = statSync(join(dir, 'secret.key'));
    expect(info.size).toBe(32);
    expect(info.mode & 0o777).toBe(0o600);

    const second = await startTestServer(env);
    try {
      expect((await second.call(`/v2/apps/${app.id}/secrets`, { method: 'GET' })).json.items.map((i: any) => i.name)).toEqual(['K']);
    } finally {
      await second.close();
    }
  });

  it('must be the one the stored secrets were encrypted with, or the server does not start', async () => {
    const other = await refusal({ FNTS_SECRET_KEY: randomBytes(32).toString('hex') });
    expect(other).toMatch(/^1 secret\(s\) in the database were stored with another key \(key id [0-9a-f]{16}\) than this server's \(key id [0-9a-f]{16}, from FNTS_SECRET_KEY\)/);
    expect(other).toContain(`start with the key they were stored with (FNTS_SECRET_KEY, or the file secret.key from the backup of the data directory ${dir})`);

    // The database restored without its key file: a new key is made, and refused.
    const keyFile = join(dir, 'secret.key');
    const kept = statSync(keyFile);
    expect(kept.size).toBe(32);
    unlinkSync(keyFile);
    expect(await refusal({})).toContain(`from ${keyFile})`);
  });
});
