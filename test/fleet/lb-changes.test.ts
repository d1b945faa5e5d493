/**
 * An LB learns of changes on its API node as they happen (it long-polls
 * GET /v2/runner/changes): with a cache time of 30 s, a fn's new config
 * reaches the LB's next calls, and a deleted fn is gone from them, well
 * within a second; so does a change made through another API node on the
 * same database (a SQLite file here: its changes table, polled).
 */
import { randomBytes } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { probeImage } from '../support/functions.js';
import { startTestServer, type TestServer } from '../support/server.js';
import { eventually } from '../support/wait.js';
import { bearer } from '../support/auth.js';

describe("an LB and its API node's changes", () => {
  let api: TestServer;
  /** Another API node on the same database; the LB does not know it. */
  let api2: TestServer;
  let runner: TestServer;
  let lb: TestServer;
  let image: string;

  beforeAll(async () => {
    image = await probeImage();
    // One secret key: both API nodes read the same secrets table.
    const key = randomBytes(32).toString('hex');
    api = await startTestServer({ FN_NODE_TYPE: 'api', FNTS_SECRET_KEY: key });
    api2 = await startTestServer({ FN_NODE_TYPE: 'api', FNTS_SECRET_KEY: key, FN_DB_URL: api.config.dbUrl });
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
    await api2?.close();
    await api?.close();
  });

  it("brings a fn's new config to the LB's calls, and its delete, well before the cache time, from either API node", async () => {
    const app = await api.app();
    const fn = await api.fn(app, image, { config: { CFG_VALUE: 'x' } });
    const setConfig = async (node: TestServer, value: string): Promise<void> => {
      const res = await fetch(`${node.url}/v2/fns/${fn.id}`, {
        method: 'PUT',
        headers: { ...bearer(), 'content-type': 'application/json' },
        body: JSON.stringify({ config: { CFG_VALUE: value } }),
      });
      expect(res.status).toBe(200);
    };
    /** How long after the change the LB's calls run with `value`. */
    const reaches = async (value: string): Promise<number> => {
      const at = performance.now();
      expect(await eventually(async () => (await lb.invoke(fn.id, {})).json?.env?.CFG_VALUE === value, 5000, 5)).toBe(true);
      return performance.now() - at;
    };
    // Both definitions get a hot container on the runner first: what is measured next is the change's way, not a container's start.
    expect((await lb.invoke(fn.id, {})).json.env.CFG_VALUE).toBe('x');
    await setConfig(api, 'y');
    const first = await reaches('y');
    const times = { api: [] as number[], other: [] as number[] };
    let value = 'y';
    for (let round = 0; round < 3; round++) {
      for (const [node, which] of [
        [api, 'api'],
        [api2, 'other'],
      ] as const) {
        // y -> x -> y ...: each a change, each to a definition with a hot container.
        value = value === 'x' ? 'y' : 'x';
        await setConfig(node, value);
        times[which].push(await reaches(value));
      }
    }
    const shown = (ts: number[]): string => ts.map((t) => `${t.toFixed(0)} ms`).join(', ');
    console.log(
      `LB: a fn's config changed reached the LB's calls after ${first.toFixed(0)} ms with a container's start; then, hot: through its API node ${shown(times.api)}, through another API node on the database ${shown(times.other)}`,
    );
    for (const t of [...times.api, ...times.other]) expect(t).toBeLessThan(1000);
    const gone = await fetch(`${api2.url}/v2/fns/${fn.id}`, { method: 'DELETE', headers: bearer() });
    expect(gone.status).toBe(204);
    expect(await eventually(async () => (await lb.invoke(fn.id, {})).status === 404, 1000, 10)).toBe(true);
  });
});
