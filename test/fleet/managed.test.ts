/**
 * A managed fleet, LB side: an LB started with FN_NPM_ADDRESS takes each
 * runner group's runners from a pool manager and tells it what each group
 * needs. The manager here is a stand-in: a real gRPC server speaking Fn's
 * 2018 protocol (loaded from the spec's own .proto, a copy in fixtures/),
 * whose membership the test sets; the API node, the three pure runners and
 * the LB are production wiring with real containers, as in fleet.test.ts
 * (fixtures/stand-in-npm.ts).
 *
 * The LB places round robin (FN_PLACER=naive), so every listed runner takes
 * a share of each burst whatever the fns' hashes. Which runner got a call is
 * read from the runners' own Status (requests received).
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { RunnerClient } from '../../src/lb/index.js';
import { probeImage } from '../support/functions.js';
import { dockerReachable, ensureFunctionImage, HELLO_FUNC_JS } from '../support/images.js';
import { startTestServer, type TestServer } from '../support/server.js';
import { eventually } from '../support/wait.js';
import { StandInManager } from './fixtures/stand-in-npm.js';

const docker = await dockerReachable();

describe.skipIf(!docker)('an LB whose runners a pool manager lists (FN_NPM_ADDRESS)', () => {
  const manager = new StandInManager();
  let api: TestServer;
  let runners: TestServer[];
  let addresses: string[];
  let probes: RunnerClient[];
  let lb: TestServer;
  let hello: string;
  let probe: string;

  /** Calls each runner has received so far (TryCalls, from its Status). */
  const received = async (): Promise<number[]> => Promise.all(probes.map(async (p) => (await p.status()).requestsReceived));
  const since = async (before: number[]): Promise<number[]> => (await received()).map((n, i) => n - before[i]!);

  beforeAll(async () => {
    [hello, probe] = await Promise.all([ensureFunctionImage('hello', HELLO_FUNC_JS), probeImage()]);
    await manager.start();
    api = await startTestServer({ FN_NODE_TYPE: 'api' });
    runners = await Promise.all([0, 1, 2].map(() => startTestServer({ FN_NODE_TYPE: 'pure-runner', FN_GRPC_PORT: '0' })));
    addresses = runners.map((r) => `127.0.0.1:${r.server.grpcPort}`);
    probes = addresses.map((a) => new RunnerClient(a));
    lb = await startTestServer({
      FN_NODE_TYPE: 'lb',
      FN_RUNNER_API_URL: api.url,
      FN_NPM_ADDRESS: `127.0.0.1:${manager.port}`,
      FNTS_NPM_POLL_MSECS: '100',
      FNTS_NPM_ADVERTISE_MSECS: '100',
      FN_PLACER: 'naive',
      FNTS_LB_CACHE_MSECS: '200',
    });
  }, 120_000);

  afterAll(async () => {
    await lb?.close();
    for (const p of probes ?? []) p.close();
    await Promise.all((runners ?? []).map((r) => r.close()));
    await api?.close();
    manager.close();
  });

  it("places each app's calls on the runners the manager lists for the app's group, and only there", async () => {
    manager.members.set('default', [addresses[0]!]);
    manager.members.set('gpu', [addresses[1]!]);
    const plain = await api.fn(await api.app(), hello);
    const gpu = await api.fn(await api.app({ annotations: { 'fnts.io/runner-group': 'gpu' } }), hello);
    const before = await received();
    const answers = await Promise.all([...Array.from({ length: 4 }, () => lb.invoke(plain.id, { name: 'plain' })), ...Array.from({ length: 4 }, () => lb.invoke(gpu.id, { name: 'gpu' }))]);
    expect(answers.map((a) => a.status)).toEqual(answers.map(() => 200));
    expect(await since(before)).toEqual([4, 4, 0]);
  });

  it('places calls on a runner the manager adds to the group', async () => {
    await manager.list('default', [addresses[0]!, addresses[2]!]);
    const fn = await api.fn(await api.app(), hello);
    const before = await received();
    const answers = await Promise.all(Array.from({ length: 8 }, (_, i) => lb.invoke(fn.id, { name: String(i) })));
    expect(answers.map((a) => a.status)).toEqual(answers.map(() => 200));
    const got = await since(before);
    expect(got[1]).toBe(0);
    expect(got[2]).toBeGreaterThan(0);
    expect(got[0]! + got[2]!).toBe(8);
  });

  it("drains a runner the manager removes: its calls in flight finish, new calls go to the others; the group's need is advertised while calls run and zero after", async () => {
    const app = await api.app();
    const [slow, quick] = await Promise.all([api.fn(app, probe, { timeout: 20 }), api.fn(app, hello)]);
    const slowCalls = Promise.all(Array.from({ length: 4 }, (_, i) => lb.invoke(slow.id, { sleep: 4000, log: `slow ${i}` })));
    // Both runners run some of them (round robin), and the manager hears the group's need: 4 calls of 128 MB.
    expect(await eventually(async () => (await Promise.all([probes[0]!.status(), probes[2]!.status()])).every((s) => s.active > 0), 10_000, 50)).toBe(true);
    expect(await eventually(() => manager.need('default') === 4 * 128, 5_000, 20)).toBe(true);

    await manager.list('default', [addresses[2]!]);
    const before = await received();
    const quickAnswers = await Promise.all(Array.from({ length: 6 }, (_, i) => lb.invoke(quick.id, { name: String(i) })));
    expect(quickAnswers.map((a) => a.status)).toEqual(quickAnswers.map(() => 200));
    expect(await since(before)).toEqual([0, 0, 6]);
    expect((await probes[0]!.status()).active).toBeGreaterThan(0);
    // The LB no longer counts the runner among those it places on.
    expect((await lb.call('/metrics', { method: 'GET' })).text).not.toContain(`fnts_lb_runner_up{runner="${addresses[0]}"}`);

    const slowAnswers = await slowCalls;
    expect(slowAnswers.map((a) => a.status)).toEqual(slowAnswers.map(() => 200));
    expect(await eventually(() => manager.need('default') === 0, 5_000, 20)).toBe(true);
    const last = manager.ads.at(-1)!;
    expect(last.lb_id).not.toBe('');
    expect(Math.abs(last.ts.seconds * 1000 - Date.now())).toBeLessThan(5_000);
  });

  it('holds a call for a group with no runners, advertising its need, until the manager lists one', async () => {
    manager.members.set('cold', []);
    const fn = await api.fn(await api.app({ annotations: { 'fnts.io/runner-group': 'cold' } }), hello, { timeout: 20 });
    const answer = lb.invoke(fn.id, { name: 'cold' });
    // This is what a manager scales up from: the LB's waiting call, 128 MB.
    expect(await eventually(() => manager.need('cold') === 128, 5_000, 20)).toBe(true);
    manager.members.set('cold', [addresses[1]!]);
    const res = await answer;
    expect(res.status).toBe(200);
    expect(res.json).toEqual({ message: 'Hello cold' });
    expect(await eventually(() => manager.need('cold') === 0, 5_000, 20)).toBe(true);
  });
});
