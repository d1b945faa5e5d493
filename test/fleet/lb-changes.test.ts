/**
 * An LB learns of changes on its API node as they happen (it long-polls
 * GET /v2/runner/changes): with a cache time of 30 s, a fn's new config
 * reaches the LB's next calls, and a deleted fn is gone from them, well
 * within a second.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { probeImage } from '../support/functions.js';
import { startTestServer, type TestServer } from '../support/server.js';
import { eventually } from '../support/wait.js';
import { bearer } from '../support/auth.js';

describe("an LB and its API node's changes", () => {
  let api: TestServer;
  let runner: TestServer;
  let lb: TestServer;
  let image: string;

  beforeAll(async () => {
    image = await probeImage();
    api = await startTestServer({ FN_NODE_TYPE: 'api' });
    runner = await startTestServer({ FN_NODE_TYPE: 'pure-runner', FN_GRPC_PORT: '0' });
    lb = await startTestServer({
      FN_NODE_TYPE: 'lb',
      FN_RUNNER_API_URL: api.url,
      FN_RUNNER_ADDRESSES: `127.0.0.1:${runner.server.grpcPort}`,
      // Long enough that only the pushed changes can explain what the test sees.
      FNTS_LB_CACHE_MSECS: '30000',
    });
  });

  afterAll(async () => {
    await lb?.close();
    await runner?.close();
    await api?.close();
  });

  it("brings a fn's new config to the LB's calls, and its delete, well before the cache time", async () => {
    const app = await api.app();
    const fn = await api.fn(app, image, { config: { CFG_ROUND: '0' } });
    expect((await lb.invoke(fn.id, {})).json.env.CFG_ROUND).toBe('0');
    const times: number[] = [];
    for (let round = 1; round <= 3; round++) {
      const res = await fetch(`${api.url}/v2/fns/${fn.id}`, {
        method: 'PUT',
        headers: { ...bearer(), 'content-type': 'application/json' },
        body: JSON.stringify({ config: { CFG_ROUND: String(round) } }),
      });
      expect(res.status).toBe(200);
      const at = performance.now();
      expect(await eventually(async () => (await lb.invoke(fn.id, {})).json?.env?.CFG_ROUND === String(round), 5000, 10)).toBe(true);
      times.push(performance.now() - at);
    }
    console.log(`LB: a fn's config changed on the API node reached the LB's calls after ${times.map((t) => `${t.toFixed(0)} ms`).join(', ')} (a runner container's start included)`);
    expect([...times].sort((x, y) => x - y)[1]).toBeLessThan(1000);
    const gone = await fetch(`${api.url}/v2/fns/${fn.id}`, { method: 'DELETE', headers: bearer() });
    expect(gone.status).toBe(204);
    expect(await eventually(async () => (await lb.invoke(fn.id, {})).status === 404, 1000, 10)).toBe(true);
  });
});
