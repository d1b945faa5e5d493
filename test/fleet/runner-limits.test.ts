/**
 * A pure runner holds every call to the limits the API holds fns to, since
 * a TryCall can come from any LB, or from anyone who reaches the gRPC port:
 * an image reference Docker's grammar refuses, memory or timeouts past the
 * API's maximums, config larger than a container can take. Each is answered
 * with a 400 that says what is wrong, before anything asks the engine, and
 * the runner goes on serving (a TryCall naming image "" or "/" once ended
 * the runner's process).
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { engageRequest, RunnerClient } from '../../src/rpc/index.js';
import { callFn, newFnFromJson, newAppFromJson, newId, type Call, type CallFn } from '../../src/models/index.js';
import { probeImage } from '../support/functions.js';
import { startTestServer, type TestServer } from '../support/server.js';

describe("a pure runner given calls past the API's limits", () => {
  let runner: TestServer;
  let client: RunnerClient;
  let good: CallFn;

  beforeAll(async () => {
    runner = await startTestServer({ FN_NODE_TYPE: 'pure-runner', FN_GRPC_PORT: '0' });
    client = new RunnerClient(`127.0.0.1:${runner.server.grpcPort}`);
    const app = newAppFromJson({ name: 'limits' });
    good = callFn(app, newFnFromJson({ app_id: app.id, name: 'probe', image: await probeImage() }));
  });

  afterAll(async () => {
    client?.close();
    await runner?.close();
  });

  /** A call of `good` with some of its fn's fields changed (as a hand-made TryCall would carry them). */
  const callOf = (fn: Partial<CallFn>): Call => ({
    id: newId(),
    type: 'sync',
    fn: { ...good, ...fn },
    triggerId: undefined,
    method: 'POST',
    url: 'http://runner.test/invoke',
    headers: ['Content-Type', 'application/json'],
    createdAt: Date.now(),
  });

  /** The runner's answer to `call`: its status and error. */
  async function engage(call: Call): Promise<{ status: number; message: string }> {
    const attempt = await client.engage(engageRequest(call, Buffer.from('{}')));
    expect(attempt.kind).toBe('committed');
    if (attempt.kind !== 'committed') return { status: 0, message: attempt.reason };
    try {
      const res = await attempt.response;
      return { status: res.status, message: '' };
    } catch (err) {
      return { status: (err as { status: number }).status, message: (err as Error).message };
    }
  }

  it.each<[string, Partial<CallFn>, RegExp]>([
    ['an empty image', { image: '' }, /^Invalid call: image it is empty$/],
    ['image "/"', { image: '/' }, /^Invalid call: image a name component is empty/],
    ['an image with upper case', { image: 'Fn/Hello' }, /^Invalid call: image the name component "Fn" must be lower-case/],
    ['image "../x" (a path, not a registry)', { image: '../x' }, /^Invalid call: image the registry ".." is not a host name/],
    ['image "a b"', { image: 'a b' }, /^Invalid call: image the name component "a b" must be lower-case letters and digits/],
    ['an image name of 300 characters', { image: `fnts/${'x'.repeat(295)}` }, /^Invalid call: image the name is longer than 255 characters$/],
    ['memory of 20300 MB', { memoryMB: 20300 }, /^Invalid call: memory must be an integer from 1 to 8192$/],
    ['a timeout of an hour', { timeoutS: 3600 }, /^Invalid call: timeout must be an integer from 1 to 300$/],
    ['an idle timeout of a day', { idleTimeoutS: 86400 }, /^Invalid call: idle_timeout must be an integer from 1 to 3600$/],
    ['a config value of 200 KB', { config: { BIG: 'x'.repeat(200 * 1024) } }, /^Invalid call: config: Invalid config, config keys must be at most 256 bytes/],
  ])('answers %s with 400 saying what is wrong, and goes on serving', async (_what, fn, message) => {
    const answer = await engage(callOf(fn));
    expect(answer.status).toBe(400);
    expect(answer.message).toMatch(message);
    // The runner is up, and runs a call within the limits.
    expect((await engage(callOf({}))).status).toBe(200);
  });

  it("runs a call whose app and fn config are both at the API's largest (the limit is one a container takes)", async () => {
    const entries = (prefix: string): Record<string, string> => Object.fromEntries(Array.from({ length: 4 }, (_, i) => [`${prefix}${i}`, 'x'.repeat(64 * 1024 - 8)]));
    const answer = await engage(callOf({ config: { ...entries('APP_'), ...entries('FN_') } }));
    expect(answer).toEqual({ status: 200, message: '' });
  });
});
