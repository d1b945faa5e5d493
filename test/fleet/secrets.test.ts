/**
 * Secrets through an LB: a fleet (an API node, a pure runner, an LB; real
 * processes' wiring and real containers) gives a function its secrets as
 * files under /run/secrets, as a full node does. The LB asks the API node
 * for them (GET /v2/runner/fns/{fnID}/secrets, with a fleet token) and
 * sends them with the call to the runner, which holds them for the fn's
 * containers: a changed secret reaches the next container; the values show
 * in no call record or log the API node keeps, nor in the LB's or the
 * runner's log output; the fleet's endpoint refuses callers without the
 * fleet right; and an LB that would send them in plaintext on the network
 * fails the call instead, saying which settings make it safe.
 */
import { createHash, randomBytes } from 'node:crypto';
import { Writable } from 'node:stream';
import { pino, type Logger } from 'pino';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { secretsImage } from '../support/functions.js';
import { bearer } from '../support/auth.js';
import { dockerReachable } from '../support/images.js';
import { startRedis, type TestRedis } from '../support/redis.js';
import { startTestServer, type TestServer } from '../support/server.js';
import { eventually } from '../support/wait.js';

const sha256 = (v: string): string => createHash('sha256').update(v).digest('hex');
/** A value no other text could hold by chance. */
const secretValue = (label: string): string => `${label}-${randomBytes(16).toString('hex')}`;

/** A logger at trace level whose lines are kept in `out.text`. */
function capturing(): { logger: Logger; out: { text: string } } {
  const out = { text: '' };
  const logger = pino(
    { level: 'trace' },
    new Writable({
      write(chunk: Buffer, _enc, done) {
        out.text += chunk.toString();
        done();
      },
    }),
  );
  return { logger, out };
}

async function putSecret(s: TestServer, owner: string, name: string, value: string): Promise<void> {
  const res = await s.call(`/v2/${owner}/secrets/${encodeURIComponent(name)}`, { method: 'PUT', body: { value }, headers: { 'content-type': 'application/json' } });
  expect(res.status, res.text).toBe(200);
}

const docker = await dockerReachable();
const CACHE_MS = 200;

describe.skipIf(!docker)('secrets in a fleet: API node, LB and a pure runner', () => {
  let redis: TestRedis;
  let api: TestServer;
  let runner: TestServer;
  let lb: TestServer;
  let image: string;
  const lbLog = capturing();
  const runnerLog = capturing();
  const tokens: Record<string, string> = {};

  beforeAll(async () => {
    [image, redis] = await Promise.all([secretsImage(), startRedis()]);
    // Detached calls wait in Redis (FN_MQ_URL) between the LB's intake and its dispatcher.
    api = await startTestServer({ FN_NODE_TYPE: 'api', FN_MQ_URL: redis.url });
    for (const role of ['fleet', 'viewer']) tokens[role] = (await api.post('/v2/tokens', { name: role, role })).token;
    runner = await startTestServer({ FN_NODE_TYPE: 'pure-runner', FN_GRPC_PORT: '0' }, runnerLog.logger);
    // The LB speaks to the API node with a fleet token (not the admin's), and to its runner in plaintext on loopback.
    lb = await startTestServer(
      {
        FN_NODE_TYPE: 'lb',
        FN_MQ_URL: redis.url,
        FN_RUNNER_API_URL: api.url,
        FN_RUNNER_ADDRESSES: `127.0.0.1:${runner.server.grpcPort}`,
        FNTS_LB_CACHE_MSECS: String(CACHE_MS),
        FN_TOKEN: tokens['fleet']!,
      },
      lbLog.logger,
    );
  }, 120_000);

  afterAll(async () => {
    await lb?.close();
    await runner?.close();
    await api?.close();
    await redis?.stop();
  });

  it("gives a function behind the LB its app's and its own secrets as files, its own winning; a changed one reaches the next container; the values show in no record, log or log output", async () => {
    const app = await api.app();
    const fn = await api.fn(app, image);
    const v = { shared: secretValue('shared'), appBoth: secretValue('app'), fnBoth: secretValue('fn') };
    await putSecret(api, `apps/${app.id}`, 'SHARED', v.shared);
    await putSecret(api, `apps/${app.id}`, 'BOTH', v.appBoth);
    await putSecret(api, `fns/${fn.id}`, 'BOTH', v.fnBoth);

    const first = await lb.invoke(fn.id);
    expect(first.status, first.text).toBe(200);
    expect(Object.keys(first.json.files)).toEqual(['BOTH', 'SHARED']);
    expect(first.json.files['BOTH']).toEqual({ sha256: sha256(v.fnBoth), bytes: v.fnBoth.length, mode: '444', write: 'EROFS' });
    expect(first.json.files['SHARED'].sha256).toBe(sha256(v.shared));
    expect(first.json.mount).toMatch(/ \/run\/secrets [a-z0-9]+ ro[, ]/);
    for (const value of Object.values(v)) expect(first.json.env).not.toContain(sha256(value));
    // The same container serves the next call: the slot key is the same while the secrets are.
    const again = await lb.invoke(fn.id);
    expect(again.json.host).toBe(first.json.host);

    const changed = secretValue('changed');
    await putSecret(api, `fns/${fn.id}`, 'BOTH', changed);
    // Within the LB's cache time the change reaches it; then a new container gets the new value.
    let after!: any;
    expect(
      await eventually(async () => {
        after = (await lb.invoke(fn.id)).json;
        return after.files?.['BOTH']?.sha256 === sha256(changed);
      }, CACHE_MS * 20),
    ).toBe(true);
    expect(after.host).not.toBe(first.json.host);
    expect(after.files['SHARED'].sha256).toBe(sha256(v.shared));
    const values = [...Object.values(v), changed];

    // The records and logs the LB handed the API node: there, and without a value.
    const seen: string[] = [];
    expect(await eventually(async () => ((await api.call(`/v2/fns/${fn.id}/calls`, { method: 'GET' })).json?.items?.length ?? 0) >= 3, 10_000)).toBe(true);
    const calls = await api.call(`/v2/fns/${fn.id}/calls`, { method: 'GET' });
    seen.push(calls.text);
    for (const c of calls.json.items) {
      seen.push((await api.call(`/v2/fns/${fn.id}/calls/${c.id}`, { method: 'GET' })).text);
      const log = await api.call(`/v2/fns/${fn.id}/calls/${c.id}/log`, { method: 'GET' });
      if (log.status === 200) seen.push(log.text);
    }
    expect(seen.some((t) => t.includes('secrets seen'))).toBe(true);
    seen.push((await api.call(`/v2/fns/${fn.id}`, { method: 'GET' })).text, (await api.call(`/v2/fns/${fn.id}/secrets`, { method: 'GET' })).text);
    seen.push((await lb.call('/metrics', { method: 'GET' })).text, (await runner.call('/metrics', { method: 'GET' })).text);
    // Trace level is on: debug lines are written, so quiet logs are not why no value shows.
    expect(lbLog.out.text).toContain('"level":');
    expect(runnerLog.out.text).toContain('"level":');
    for (const value of values) {
      for (const text of seen) expect(text).not.toContain(value);
      expect(lbLog.out.text).not.toContain(value);
      expect(runnerLog.out.text).not.toContain(value);
    }
  }, 90_000);

  it('gives a detached call through the LB (queued in Redis, placed by its dispatcher) the secrets too', async () => {
    const app = await api.app();
    const fn = await api.fn(app, image);
    const value = secretValue('detached');
    await putSecret(api, `fns/${fn.id}`, 'QUEUED', value);
    const res = await lb.invoke(fn.id, {}, { 'Fn-Invoke-Type': 'detached' });
    expect(res.status, res.text).toBe(202);
    const id = res.headers.get('fn-call-id')!;
    expect(await eventually(async () => (await api.call(`/v2/fns/${fn.id}/calls/${id}`, { method: 'GET' })).json?.status === 'success', 30_000)).toBe(true);
    // The function printed what it saw (digests): its log, on the API node, shows the file, never the value.
    let log = '';
    expect(
      await eventually(async () => {
        log = (await api.call(`/v2/fns/${fn.id}/calls/${id}/log`, { method: 'GET' })).text;
        return log.includes('secrets seen');
      }, 10_000),
    ).toBe(true);
    expect(log).toContain(sha256(value));
    expect(log).not.toContain(value);
    expect(lbLog.out.text).not.toContain(value);
    expect(runnerLog.out.text).not.toContain(value);
  }, 60_000);

  it('answers the fleet with the values and their version; refuses callers without a token (401) or without the fleet right (403)', async () => {
    const app = await api.app();
    const fn = await api.fn(app, image);
    const none = await api.call(`/v2/runner/fns/${fn.id}/secrets`, { method: 'GET', headers: bearer(tokens['fleet']) });
    expect(none.status, none.text).toBe(200);
    expect(none.json).toEqual({ version: '', secrets: {} });
    const value = secretValue('one');
    await putSecret(api, `apps/${app.id}`, 'ONE', value);
    const one = await api.call(`/v2/runner/fns/${fn.id}/secrets`, { method: 'GET', headers: bearer(tokens['fleet']) });
    expect(one.status).toBe(200);
    expect(one.json.secrets).toEqual({ ONE: value });
    expect(one.json.version).toMatch(/^[0-9a-f]+$/);
    expect(one.headers.get('cache-control')).toBe('no-store');
    // The admin's token has the fleet right too.
    expect((await api.call(`/v2/runner/fns/${fn.id}/secrets`, { method: 'GET' })).status).toBe(200);
    const anonymous = await api.call(`/v2/runner/fns/${fn.id}/secrets`, { method: 'GET', headers: { authorization: '' } });
    expect(anonymous.status).toBe(401);
    const viewer = await api.call(`/v2/runner/fns/${fn.id}/secrets`, { method: 'GET', headers: bearer(tokens['viewer']) });
    expect(viewer.status).toBe(403);
    for (const refused of [anonymous, viewer]) expect(refused.text).not.toContain(value);
    expect((await api.call('/v2/runner/fns/01ARZ3NDEKTSV4RRFFQ69G5FAV/secrets', { method: 'GET' })).status).toBe(404);
  });

  it('fails a call of a fn with secrets (500, naming FNTS_GRPC_TLS_*) rather than send them in plaintext to a runner on the network', async () => {
    const app = await api.app();
    const fn = await api.fn(app, image);
    const value = secretValue('plain');
    await putSecret(api, `fns/${fn.id}`, 'PLAIN', value);
    const { logger, out } = capturing();
    // A runner address off this machine (TEST-NET-1, RFC 5737): nothing is dialled before the check.
    const exposed = await startTestServer({ FN_NODE_TYPE: 'lb', FN_RUNNER_API_URL: api.url, FN_RUNNER_ADDRESSES: '192.0.2.1:9190', FN_TOKEN: tokens['fleet']! }, logger);
    try {
      const res = await exposed.invoke(fn.id);
      expect(res.status).toBe(500);
      expect(res.json.message).toMatch(/FNTS_GRPC_TLS_CERT, FNTS_GRPC_TLS_KEY and FNTS_GRPC_TLS_CA/);
      expect(res.text).not.toContain(value);
    } finally {
      await exposed.close();
    }
    expect(out.text).toContain('FNTS_GRPC_TLS_CERT');
    expect(out.text).not.toContain(value);
  }, 30_000);
});
