/**
 * Tokens as an operator meets them, with the real `fnts` process: the first
 * admin token made at first start (admin.token, 0600, never logged), a bad
 * FNTS_ADMIN_TOKEN refused, FNTS_AUTH=off warned about, `fnts token`
 * create/list/revoke, and a token revoked on one node refused by another
 * sharing the database within a second.
 */
import { mkdtempSync, readFileSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { bearer } from '../support/auth.js';
import { runFnts, startFnts, type FntsProcess } from '../support/process.js';

const dirs: string[] = [];
const tempDir = (): string => {
  const d = mkdtempSync(join(tmpdir(), 'fnts-auth-'));
  dirs.push(d);
  return d;
};
afterAll(() => {
  for (const d of dirs) rmSync(d, { recursive: true, force: true });
});

/** No test token: this process runs as an operator's would (FNTS_ADMIN_TOKEN unset). */
const asOperator = { FNTS_ADMIN_TOKEN: '', FN_TOKEN: '' };

describe('the first admin token', () => {
  it('is made at first start into admin.token (0600), logged by path only, and kept across restarts', async () => {
    const dir = tempDir();
    const env = { ...asOperator, FN_NODE_TYPE: 'api', FN_DB_URL: `sqlite3://${join(dir, 'fn.db')}`, FN_LOG_LEVEL: 'info' };
    let server = await startFnts(env);
    const file = join(dir, 'admin.token');
    const token = readFileSync(file, 'utf8').trim();
    expect(token).toMatch(/^fnts_[0-9a-f]{16}_[A-Za-z0-9_-]{43}$/);
    expect(statSync(file).mode & 0o777).toBe(0o600);
    expect(server.output()).toContain(`made the first admin token, in ${file}`);
    expect(server.output()).not.toContain(token.slice(22));
    expect((await fetch(`${server.url}/v2/apps`, { headers: bearer(token) })).status).toBe(200);
    expect((await fetch(`${server.url}/v2/apps`)).status).toBe(401);
    expect(await server.stop()).toBe(0);

    server = await startFnts(env);
    expect(readFileSync(file, 'utf8').trim()).toBe(token);
    expect(server.output()).toContain(`the first admin token is in ${file}`);
    expect((await fetch(`${server.url}/v2/apps`, { headers: bearer(token) })).status).toBe(200);
    expect(await server.stop()).toBe(0);
  });

  it('FNTS_ADMIN_TOKEN shorter than 32 characters is refused at start, saying how to make one', async () => {
    const { done } = runFnts(['serve'], { FN_NODE_TYPE: 'api', FN_DB_URL: `sqlite3://${join(tempDir(), 'fn.db')}`, FNTS_ADMIN_TOKEN: 'short-secret', FN_PORT: '0' });
    const { code, output } = await done;
    expect(code).toBe(2);
    expect(output).toContain('FNTS_ADMIN_TOKEN must be 32 to 512 printable characters without spaces; make one with: openssl rand -hex 32');
  });

  it('FNTS_AUTH=off opens the API, with a warning when it listens beyond loopback', async () => {
    const server = await startFnts({ ...asOperator, FN_NODE_TYPE: 'api', FN_DB_URL: `sqlite3://${join(tempDir(), 'fn.db')}`, FNTS_AUTH: 'off', FN_LISTEN_HOST: '0.0.0.0' });
    expect((await fetch(`${server.url}/v2/apps`)).status).toBe(200);
    expect(server.output()).toContain('FNTS_AUTH=off: the management API (/v2) is open to whoever reaches this port, and it listens on 0.0.0.0');
    expect(await server.stop()).toBe(0);
  });
});

describe('fnts token, and two nodes sharing a database', () => {
  let a: FntsProcess;
  let b: FntsProcess;
  let adminToken: string;

  beforeAll(async () => {
    const dir = tempDir();
    const env = { ...asOperator, FN_NODE_TYPE: 'api', FN_DB_URL: `sqlite3://${join(dir, 'fn.db')}` };
    a = await startFnts(env);
    adminToken = readFileSync(join(dir, 'admin.token'), 'utf8').trim();
    b = await startFnts(env);
  });
  afterAll(async () => {
    await a?.stop();
    await b?.stop();
  });

  const cli = async (args: string[], token = adminToken): Promise<{ code: number | null; output: string }> => runFnts(['token', ...args], { FN_API_URL: a.url, FN_TOKEN: token }).done;

  it('creates, lists and revokes tokens from the command line, with errors that say what to set', async () => {
    const made = await cli(['create', '--name', 'ci', '--role', 'developer', '--apps', 'web,api', '--quiet']);
    expect(made.code).toBe(0);
    const token = made.output.trim();
    expect(token).toMatch(/^fnts_[0-9a-f]{16}_/);
    const listed = await cli(['list']);
    expect(listed.output).toMatch(/ID\s+NAME\s+ROLE\s+APPS/);
    expect(listed.output).toMatch(/ci\s+developer\s+web,api/);
    expect(listed.output).not.toContain(token.slice(22));
    const id = token.slice(5, 21);
    expect((await cli(['revoke', id])).output).toContain(`revoked ${id}`);
    expect((await cli(['list'])).output).not.toMatch(/\bci\b/);

    const noToken = await runFnts(['token', 'list'], { FN_API_URL: a.url, FN_TOKEN: '' }).done;
    expect(noToken.code).toBe(1);
    expect(noToken.output).toContain('set FN_TOKEN to an admin token');
    const notAdmin = await cli(['list'], (await cli(['create', '--name', 'v', '--role', 'viewer', '--quiet'])).output.trim());
    expect(notAdmin.output).toContain('FN_TOKEN must be an admin token');
    const unreachable = await runFnts(['token', 'list'], { FN_API_URL: 'http://127.0.0.1:1', FN_TOKEN: adminToken }).done;
    expect(unreachable.output).toContain('cannot reach the fnts API at http://127.0.0.1:1');
  });

  it('a token made on one node works on the other, and once revoked there is refused within a second', async () => {
    const { id, token } = (await (
      await fetch(`${a.url}/v2/tokens`, { method: 'POST', body: JSON.stringify({ name: 'shared', role: 'viewer' }), headers: { ...bearer(adminToken), 'content-type': 'application/json' } })
    ).json()) as { id: string; token: string };
    const onB = async (): Promise<number> => (await fetch(`${b.url}/v2/apps`, { headers: bearer(token) })).status;
    const t0 = performance.now();
    while ((await onB()) !== 200) {
      expect(performance.now() - t0).toBeLessThan(1500);
      await new Promise((r) => setTimeout(r, 20));
    }
    expect((await fetch(`${a.url}/v2/tokens/${id}`, { method: 'DELETE', headers: bearer(adminToken) })).status).toBe(204);
    const revokedAt = performance.now();
    while ((await onB()) !== 401) await new Promise((r) => setTimeout(r, 20));
    const tookMs = performance.now() - revokedAt;
    expect(tookMs).toBeLessThan(1000);
  });
});
