/**
 * The agent as an Invoker, on real containers: each call's outcome (status,
 * whether the function caused its failure, timings), the container's output
 * during a call attributed to that call and capped, and detached calls run
 * as such, on the fn's hot containers.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Call, CallFn, CallOutcome } from '../../src/models/index.js';
import { probeImage } from '../support/functions.js';
import { startTestServer, type TestServer } from '../support/server.js';

describe('the agent as an Invoker', () => {
  let s: TestServer;
  let fn: CallFn;
  let n = 0;
  const outcomes = new Map<string, CallOutcome>();

  beforeAll(async () => {
    s = await startTestServer({ FN_MAX_LOG_SIZE_BYTES: '2000' });
    s.server.agent!.addListener({ onCallEnd: (call, outcome) => outcomes.set(call.id, outcome) });
    const app = await s.app();
    const image = await probeImage();
    const created = await s.fn(app, image, { timeout: 2 });
    fn = Object.freeze({
      appId: app.id,
      appName: app.name,
      fnId: created.id,
      fnName: created.name,
      image,
      format: 'http-stream',
      memoryMB: created.memory,
      cpuMillis: 0,
      timeoutS: 2,
      idleTimeoutS: created.idle_timeout,
      tmpfsMB: 0,
      config: {},
      annotations: {},
      syslogUrl: undefined,
      runnerGroup: 'default',
    } as const);
  });
  afterAll(async () => {
    await s?.close();
  });

  const call = (type: Call['type'] = 'sync'): Call => ({
    id: `outcome-${process.pid}-${n++}`,
    type,
    fn,
    triggerId: undefined,
    method: 'POST',
    url: 'http://fnts.test/invoke/x',
    headers: ['Content-Type', 'application/json'],
    createdAt: Date.now(),
  });

  it("keeps what the container wrote during a call with that call's outcome, and only that", async () => {
    const first = s.server.agent!.invoke(call(), Buffer.from(JSON.stringify({ log: 'first call' })));
    expect((await first.response).status).toBe(200);
    // Output travels apart from the answer and may trail it (agent/logs.ts, LOG_GRACE_MS): what arrives once
    // the container began its next call is that call's. So the next call waits for the first's log to close;
    // back to back, a loaded machine gave the first call's late line to the second (2 runs in 20).
    const one = await first.log;
    const second = s.server.agent!.invoke(call(), Buffer.from(JSON.stringify({ log: 'second call' })));
    expect((await second.response).status).toBe(200);
    const two = await second.log;
    expect(one).toContain('first call (stdout)');
    expect(one).toContain('first call (stderr)');
    expect(one).not.toContain('second call');
    expect(two).toContain('second call (stdout)');
    expect(two).toContain('second call (stderr)');
    expect(two).not.toContain('first call');
    const outcome = await first.outcome;
    expect(outcome).toMatchObject({ status: 'success', httpStatus: 200, errorUser: false });
    expect(outcome.timings.exec_ms).toBeGreaterThanOrEqual(0);
  });

  it('cuts a call log at FN_MAX_LOG_SIZE_BYTES and says so', async () => {
    const running = s.server.agent!.invoke(call(), Buffer.from(JSON.stringify({ logBytes: 50_000 })));
    await running.response;
    const log = await running.log;
    expect(log).toContain('[log cut at 2000 bytes');
    expect(log.length).toBeLessThan(2200);
  });

  it("says when a failure was the function's doing", async () => {
    const running = s.server.agent!.invoke(call(), Buffer.from(JSON.stringify({ sleep: 3000 })));
    await expect(running.response).rejects.toMatchObject({ status: 504 });
    expect(await running.outcome).toMatchObject({ status: 'timeout', httpStatus: 504, error: 'Timed out', errorUser: true });
  });

  it("runs a detached call as detached on the fn's hot containers: FN_TYPE is sync for both, as Fn sets it", async () => {
    const sync = JSON.parse(((await s.server.agent!.invoke(call(), Buffer.from('{}')).response).body as Buffer).toString());
    const detached = call('detached');
    const running = s.server.agent!.invoke(detached, Buffer.from('{}'));
    const seen = JSON.parse(((await running.response).body as Buffer).toString());
    // The container the sync call left idle took the detached call: no second one started.
    expect(seen.hostname).toBe(sync.hostname);
    expect(seen.env.FN_TYPE).toBe('sync');
    // Listeners hear of every call, with its id.
    expect(outcomes.get(detached.id)).toMatchObject({ id: detached.id, status: 'success' });
  });
});
