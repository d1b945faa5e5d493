/**
 * A whole fnts fleet in one test process, production wiring for each role:
 * an API node, two pure runners (FN_NODE_TYPE=pure-runner, real containers)
 * and an LB (FN_NODE_TYPE=lb) in front of them, configured with Fn's
 * variables. Calls go through the LB as a user's would.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { probeImage } from '../support/functions.js';
import { dockerReachable, ensureFunctionImage, HELLO_FUNC_JS } from '../support/images.js';
import { bearer } from '../support/auth.js';
import { startTestServer, type TestServer } from '../support/server.js';

const ECHO_FUNC_JS = `const fdk = require('@fnproject/fdk');
fdk.handle(function (input, ctx) {
  ctx.responseContentType = 'application/json';
  if (ctx.httpGateway) {
    ctx.httpGateway.statusCode = 201;
    ctx.httpGateway.setResponseHeader('X-Echo', ctx.httpGateway.getHeader('X-Ask') || 'none');
  }
  return { input: input, callId: ctx.callID, method: ctx.httpGateway ? ctx.httpGateway.method : null, url: ctx.httpGateway ? ctx.httpGateway.requestURL : null, runner: process.env.FN_FN_ID };
}, { inputMode: 'string' });
`;

const docker = await dockerReachable();

describe.skipIf(!docker)('an fnts fleet: API node, LB and two pure runners', () => {
  let api: TestServer;
  let runners: TestServer[];
  let lb: TestServer;
  let hello: string;
  let echo: string;

  beforeAll(async () => {
    [hello, echo] = await Promise.all([ensureFunctionImage('hello', HELLO_FUNC_JS), ensureFunctionImage('echo', ECHO_FUNC_JS)]);
    api = await startTestServer({ FN_NODE_TYPE: 'api' });
    runners = await Promise.all([0, 1].map(() => startTestServer({ FN_NODE_TYPE: 'pure-runner', FN_GRPC_PORT: '0' })));
    lb = await startTestServer({
      FN_NODE_TYPE: 'lb',
      FN_RUNNER_API_URL: api.url,
      FN_RUNNER_ADDRESSES: runners.map((r) => `127.0.0.1:${r.server.grpcPort}`).join(','),
      FNTS_LB_CACHE_MSECS: '200',
    });
  });

  afterAll(async () => {
    await lb?.close();
    await Promise.all((runners ?? []).map((r) => r.close()));
    await api?.close();
  });

  it('serves /invoke through a runner, with the call id the function saw', async () => {
    const app = await api.app();
    const fn = await api.fn(app, hello);
    const res = await lb.invoke(fn.id, { name: 'fleet' });
    expect(res.status).toBe(200);
    expect(res.json).toEqual({ message: 'Hello fleet' });
    expect(res.headers.get('fn-call-id')).toMatch(/^[0-9A-Z]{26}$/);
    // A whole answer comes from the runner at once, and goes to the caller with its length, as a full node sends it.
    expect(res.headers.get('content-length')).toBe(String(Buffer.byteLength(JSON.stringify(res.json))));
    expect(res.headers.get('transfer-encoding')).toBeNull();
  });

  it("serves an HTTP trigger: the caller's method, URL and headers reach the function, its status and headers come back", async () => {
    const app = await api.app();
    const fn = await api.fn(app, echo);
    await api.post('/v2/triggers', { app_id: app.id, fn_id: fn.id, name: 'echo', type: 'http', source: '/echo/it' });
    const res = await lb.call(`/t/${app.name}/echo/it?q=1`, { method: 'PUT', body: 'hi there', headers: { 'X-Ask': 'yes', 'content-type': 'text/plain' } });
    expect(res.status).toBe(201);
    expect(res.headers.get('x-echo')).toBe('yes');
    expect(res.json.input).toBe('hi there');
    expect(res.json.method).toBe('PUT');
    expect(res.json.url).toMatch(/\/t\/app\d+\/echo\/it\?q=1$/);
    expect(res.json.callId).toBe(res.headers.get('fn-call-id'));
  });

  it("answers Fn's 404s for what the API node does not have", async () => {
    const missingFn = await lb.invoke('01ARZ3NDEKTSV4RRFFQ69G5FAV');
    expect(missingFn.status).toBe(404);
    expect(missingFn.json).toEqual({ message: 'Fn not found' });
    const missingApp = await lb.call('/t/no-such-app/x', { method: 'GET' });
    expect(missingApp.status).toBe(404);
    expect(missingApp.json).toEqual({ message: 'App not found' });
  });

  it('spreads load over both runners and keeps every call', async () => {
    const app = await api.app();
    const fns = await Promise.all([0, 1, 2, 3].map(() => api.fn(app, hello)));
    const answers = await Promise.all(Array.from({ length: 40 }, (_, i) => lb.invoke(fns[i % 4].id, { name: String(i) })));
    expect(answers.map((a) => a.status)).toEqual(answers.map(() => 200));
    expect(answers.map((a) => a.json.message)).toEqual(answers.map((_, i) => `Hello ${i}`));
    const used = runners.filter((r) => r.server.agent!.snapshot().containers > 0);
    expect(used.length).toBe(2);
  });

  it('counts placements on the LB and engagements on the runners at /metrics', async () => {
    const lbText = (await lb.call('/metrics', { method: 'GET' })).text;
    for (const r of runners) {
      const address = `127.0.0.1:${r.server.grpcPort}`;
      expect(lbText).toMatch(new RegExp(`fnts_lb_placed_total\\{runner="${address}"\\} [1-9]`));
      expect(lbText).toContain(`fnts_lb_runner_up{runner="${address}"} 1`);
      const runnerText = (await r.call('/metrics', { method: 'GET' })).text;
      expect(runnerText).toMatch(/fnts_runner_engagements_total\{result="handled"\} [1-9]/);
      expect(runnerText).toMatch(/fn_completed\{app_id="\w+",fn_id="\w+"\} [1-9]/);
    }
    expect(lbText).toMatch(/fnts_lb_placement_duration_seconds_count [1-9]/);
  });

  it('checks invoke-auth on the LB through the API node, with its own fleet token, and refuses without a token before placing', async () => {
    const app = await api.app();
    const fn = await api.fn(app, hello, { annotations: { 'fnts.io/invoke-auth': 'token' } });
    const invoker = (await api.post('/v2/tokens', { name: 'caller', role: 'invoker', apps: [app.name] })).token;
    const fleetToken = (await api.post('/v2/tokens', { name: 'lb', role: 'fleet' })).token;
    const lbOwn = await startTestServer({ FN_NODE_TYPE: 'lb', FN_RUNNER_API_URL: api.url, FN_RUNNER_ADDRESSES: `127.0.0.1:${runners[0]!.server.grpcPort}`, FN_TOKEN: fleetToken });
    try {
      expect((await lbOwn.invoke(fn.id, { name: 'x' })).status).toBe(401);
      expect((await lbOwn.invoke(fn.id, { name: 'x' }, bearer('fnts_0123456789abcdef_AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA'))).status).toBe(401);
      const ok = await lbOwn.invoke(fn.id, { name: 'token' }, bearer(invoker));
      expect({ status: ok.status, body: ok.json }).toEqual({ status: 200, body: { message: 'Hello token' } });
    } finally {
      await lbOwn.close();
    }
    // An LB whose FN_TOKEN the API node does not know says so, and what to set: the operator's to fix (503), not the caller's.
    const lbWrong = await startTestServer({
      FN_NODE_TYPE: 'lb',
      FN_RUNNER_API_URL: api.url,
      FN_RUNNER_ADDRESSES: `127.0.0.1:${runners[0]!.server.grpcPort}`,
      FN_TOKEN: 'not-a-token-the-api-node-knows',
    });
    try {
      const res = await lbWrong.invoke(fn.id, { name: 'x' }, bearer(invoker));
      expect(res.status).toBe(503);
      expect(res.json.message).toContain('set FN_TOKEN to a token with the fleet role');
    } finally {
      await lbWrong.close();
    }
  });

  it("keeps the caller's fnts tokens from a public fn, the API node's FNTS_ADMIN_TOKEN of the operator's own shape too; the function's own Authorization reaches it", async () => {
    const app = await api.app();
    const fn = await api.fn(app, await probeImage());
    const seen = async (authorization: string): Promise<unknown> => {
      const res = await lb.invoke(fn.id, {}, { authorization });
      expect(res.status, res.text).toBe(200);
      const found = Object.entries(res.json.headers as Record<string, string | string[]>).find(([name]) => name.toLowerCase() === 'authorization')?.[1];
      return Array.isArray(found) ? found[0] : found;
    };
    // bearer(): the test fleet's FNTS_ADMIN_TOKEN, not shaped fnts_<id>_<secret> (what `fn invoke` sends with FN_TOKEN set to it).
    expect(await seen(bearer()['authorization']!)).toBeUndefined();
    expect(await seen(`Bearer ${(await api.post('/v2/tokens', { name: 'invoker', role: 'invoker' })).token}`)).toBeUndefined();
    expect(await seen('Bearer eyJhbGciOiJIUzI1NiJ9.e30.sig')).toBe('Bearer eyJhbGciOiJIUzI1NiJ9.e30.sig');
    expect(await seen('Basic YTpi')).toBe('Basic YTpi');
  });

  it('serves no management API on the LB or the runners', async () => {
    expect((await lb.call('/v2/apps', { method: 'GET' })).status).toBe(404);
    expect((await runners[0]!.call('/v2/apps', { method: 'GET' })).status).toBe(404);
    expect((await runners[0]!.call('/version', { method: 'GET' })).status).toBe(200);
  });
});

describe.skipIf(!docker)('an LB in front of full runners', () => {
  let api: TestServer;
  let runners: TestServer[];
  let lb: TestServer;

  beforeAll(async () => {
    api = await startTestServer({ FN_NODE_TYPE: 'api' });
    // Room for one 128 MB container each.
    runners = await Promise.all([0, 1].map(() => startTestServer({ FN_NODE_TYPE: 'pure-runner', FN_GRPC_PORT: '0', FN_MAX_TOTAL_MEMORY_BYTES: String(200 * 1024 * 1024) })));
    lb = await startTestServer({ FN_NODE_TYPE: 'lb', FN_RUNNER_API_URL: api.url, FN_RUNNER_ADDRESSES: runners.map((r) => `127.0.0.1:${r.server.grpcPort}`).join(',') });
  });

  afterAll(async () => {
    await lb?.close();
    await Promise.all((runners ?? []).map((r) => r.close()));
    await api?.close();
  });

  it('places a call a full runner refused on the other one, and one no runner has room for once a runner frees up', async () => {
    const image = await probeImage();
    const app = await api.app();
    const fns = await Promise.all([0, 1, 2].map(() => api.fn(app, image, { timeout: 20 })));
    const answers = await Promise.all(fns.map((fn) => lb.invoke(fn.id, { sleep: 1500 })));
    expect(answers.map((a) => a.status)).toEqual([200, 200, 200]);
    // Each runner ran at least one of them; the third waited for room (its idle container to be evicted) rather than failing.
    for (const r of runners) expect((await r.call('/metrics', { method: 'GET' })).text).toMatch(/fnts_runner_engagements_total\{result="handled"\} [1-9]/);
    const lbText = (await lb.call('/metrics', { method: 'GET' })).text;
    expect(lbText).toMatch(/fnts_lb_retries_total\{reason="refused"\} [1-9]/);
    expect(Math.max(...answers.map((a) => a.ms))).toBeGreaterThan(2500);
  });
});
