/**
 * Two fnts full nodes on one database server (Postgres, then MariaDB), each
 * a real process with its own agent and real containers, as an operator
 * runs two API nodes behind a load balancer: both start at the same moment
 * on an empty database; what one stores the other serves; a name created on
 * both at once is created once; cursors cross nodes; a change made on one
 * reaches the other's calls within a second; a deleted fn is gone from the
 * other's invoke path; detached calls accepted by one run on the other when
 * the first is killed; a database restart under load is survived.
 */
import { randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { bearer } from '../support/auth.js';
import { startDatabase, type TestDatabase } from '../support/databases.js';
import { probeImage } from '../support/functions.js';
import { startFnts, type FntsProcess } from '../support/process.js';
import { eventually } from '../support/wait.js';

const SECRET_KEY = randomBytes(32).toString('hex');

interface Answer {
  status: number;
  headers: Headers;
  body: any;
  ms: number;
}

async function ask(node: FntsProcess, method: string, path: string, body?: unknown, headers: Record<string, string> = {}): Promise<Answer> {
  const started = performance.now();
  const res = await fetch(`${node.url}${path}`, {
    method,
    headers: { ...bearer(), ...(body === undefined ? {} : { 'content-type': 'application/json' }), ...headers },
    ...(body === undefined ? {} : { body: JSON.stringify(body) }),
    signal: AbortSignal.timeout(20_000),
  });
  const text = await res.text();
  let parsed: unknown = text;
  try {
    parsed = text === '' ? undefined : JSON.parse(text);
  } catch {
    // not JSON: kept as text
  }
  return { status: res.status, headers: res.headers, body: parsed, ms: performance.now() - started };
}

for (const kind of ['postgres', 'mysql'] as const) {
  describe(`two fnts nodes on one ${kind} database`, () => {
    let server: TestDatabase;
    let url: string;
    let a: FntsProcess;
    let b: FntsProcess;
    let image: string;
    const dirs: string[] = [];
    const node = (): Promise<FntsProcess> => {
      const dir = mkdtempSync(join(tmpdir(), 'fnts-node-'));
      dirs.push(dir);
      return startFnts({ FN_DB_URL: url, FNTS_SECRET_KEY: SECRET_KEY, FNTS_DATA_DIR: dir, FN_LOG_LEVEL: 'info', FNTS_DB_POOL_SIZE: '4' }, { timeoutMs: 60_000 });
    };

    beforeAll(async () => {
      [server, image] = await Promise.all([startDatabase(kind), probeImage()]);
      url = await server.newDatabase();
    }, 180_000);
    afterAll(async () => {
      await Promise.all([a, b].map((n) => n?.stop().catch(() => undefined)));
      await server?.stop();
      for (const d of dirs) rmSync(d, { recursive: true, force: true });
    });

    it('both come up when started at the same moment on an empty database', async () => {
      [a, b] = await Promise.all([node(), node()]);
      for (const n of [a, b]) expect((await ask(n, 'GET', '/ready')).status).toBe(200);
    });

    it('serves on one node what was stored through the other, and lets one of two same-name creates win', async () => {
      const app = (await ask(a, 'POST', '/v2/apps', { name: 'shared', config: { LEVEL: 'debug' } })).body;
      expect((await ask(b, 'GET', `/v2/apps/${app.id}`)).body).toEqual(app);
      const updated = await ask(b, 'PUT', `/v2/apps/${app.id}`, { config: { LEVEL: 'info' } });
      expect(updated.status).toBe(200);
      expect((await ask(a, 'GET', `/v2/apps/${app.id}`)).body.config).toEqual({ LEVEL: 'info' });

      for (let i = 0; i < 5; i++) {
        const both = await Promise.all([a, b].map((n) => ask(n, 'POST', '/v2/apps', { name: `race-${i}` })));
        expect(both.map((r) => r.status).sort()).toEqual([200, 409]);
        expect(both.find((r) => r.status === 409)!.body).toEqual({ message: 'App already exists' });
      }
    });

    it('pages with a cursor of one node on the other', async () => {
      const names = new Set<string>();
      let page = await ask(a, 'GET', '/v2/apps?per_page=2');
      for (const n of page.body.items) names.add(n.name);
      let turn = 0;
      while (page.body.next_cursor) {
        page = await ask(turn++ % 2 === 0 ? b : a, 'GET', `/v2/apps?per_page=2&cursor=${encodeURIComponent(page.body.next_cursor)}`);
        expect(page.status).toBe(200);
        for (const n of page.body.items) names.add(n.name);
      }
      expect([...names].sort()).toEqual(['race-0', 'race-1', 'race-2', 'race-3', 'race-4', 'shared']);
    });

    it("brings a change made on one node to the other's calls within a second, and a delete to its invoke path", async () => {
      const app = (await ask(a, 'POST', '/v2/apps', { name: 'changing' })).body;
      const fn = (await ask(a, 'POST', '/v2/fns', { app_id: app.id, name: 'probe', image, config: { CFG_ROUND: '0' } })).body;
      // Each node has the fn cached, and a hot container of it.
      for (const n of [a, b]) {
        const first = await ask(n, 'POST', `/invoke/${fn.id}`, {});
        expect(first.body?.env?.CFG_ROUND, `${first.status} ${JSON.stringify(first.body)}`).toBe('0');
      }
      // What B's caches act on is its change feed (the lookup cache empties as it publishes): timed from the PUT on A to B's
      // feed answering; then the time until B's calls run with the new config, a new container's start included.
      const feed = `/v2/runner/changes`;
      let cursor = (await ask(b, 'GET', `${feed}?wait=0`)).body.cursor as string;
      const heard: number[] = [];
      const called: number[] = [];
      for (let round = 1; round <= 3; round++) {
        const hearing = ask(b, 'GET', `${feed}?after=${encodeURIComponent(cursor)}&wait=5000`);
        const at = performance.now();
        expect((await ask(a, 'PUT', `/v2/fns/${fn.id}`, { config: { CFG_ROUND: String(round) } })).status).toBe(200);
        const answer = await hearing;
        heard.push(performance.now() - at);
        expect(answer.body.changes).toContainEqual({ kind: 'fn', id: fn.id, appId: app.id });
        cursor = answer.body.cursor;
        expect(await eventually(async () => (await ask(b, 'POST', `/invoke/${fn.id}`, {})).body?.env?.CFG_ROUND === String(round), 5000, 20), `round ${round} seen on the other node`).toBe(true);
        called.push(performance.now() - at);
      }
      const ms = (xs: number[]): string => xs.map((x) => `${x.toFixed(0)} ms`).join(', ');
      console.log(`${kind}: a fn's config changed on one node reached the other's lookups after ${ms(heard)}, its calls after ${ms(called)} (a new container's start included)`);
      for (const t of heard) expect(t).toBeLessThan(1000);

      expect((await ask(a, 'DELETE', `/v2/fns/${fn.id}`)).status).toBe(204);
      expect(await eventually(async () => (await ask(b, 'POST', `/invoke/${fn.id}`, {})).status === 404, 1000, 20)).toBe(true);
    });

    it('runs on the other node the detached calls one node accepted when that node is killed', async () => {
      const app = (await ask(a, 'POST', '/v2/apps', { name: 'detached' })).body;
      const fn = (await ask(a, 'POST', '/v2/fns', { app_id: app.id, name: 'slowish', image })).body;
      const ids: string[] = [];
      for (let i = 0; i < 20; i++) {
        const res = await ask(a, 'POST', `/invoke/${fn.id}`, { sleep: 200, n: i }, { 'Fn-Invoke-Type': 'detached' });
        expect(res.status).toBe(202);
        ids.push(res.headers.get('fn-call-id')!);
      }
      await a.stop('SIGKILL').catch(() => undefined);
      try {
        await ranOnB();
      } finally {
        // The next test needs both nodes; the new A also removes the containers the killed one left.
        a = await node();
      }
      async function ranOnB(): Promise<void> {
        let statuses = new Map<string, string>();
        const done = async (): Promise<boolean> => {
          const page = await ask(b, 'GET', `/v2/fns/${fn.id}/calls?per_page=100`);
          statuses = new Map<string, string>(page.body.items.map((c: { id: string; status: string }) => [c.id, c.status]));
          return ids.every((id) => statuses.get(id) === 'success');
        };
        const killedAt = performance.now();
        expect(await eventually(done, 60_000, 250), `calls' statuses on the other node: ${JSON.stringify(ids.map((id) => statuses.get(id) ?? 'none'))}`).toBe(true);
        console.log(`${kind}: 20 detached calls accepted by a killed node all ran on the other within ${((performance.now() - killedAt) / 1000).toFixed(1)} s`);
      }
    }, 120_000);

    it('survives a restart of the database under load: 503 within 2 s while it is down, everything serves again by itself', async () => {
      const app = (await ask(a, 'POST', '/v2/apps', { name: 'outage' })).body;
      const fn = (await ask(a, 'POST', '/v2/fns', { app_id: app.id, name: 'probe', image })).body;
      let stop = false;
      const failures: Answer[] = [];
      const load = async (n: FntsProcess): Promise<number> => {
        let served = 0;
        while (!stop) {
          const res = await ask(n, 'GET', `/v2/apps/${app.id}`).catch(() => undefined);
          if (res?.status === 200) served++;
          else if (res) failures.push(res);
          await ask(n, 'POST', `/invoke/${fn.id}`, {}).catch(() => undefined);
        }
        return served;
      };
      const loads = [load(a), load(b)];
      await new Promise((r) => setTimeout(r, 500));
      await server.kill();
      await new Promise((r) => setTimeout(r, 2500));
      const down = await Promise.all([a, b].map((n) => ask(n, 'GET', '/ready')));
      for (const r of down) expect(r.status).toBe(503);
      await server.start();
      expect(await eventually(async () => (await Promise.all([a, b].map((n) => ask(n, 'GET', '/ready')))).every((r) => r.status === 200), 20_000, 200)).toBe(true);
      await new Promise((r) => setTimeout(r, 500));
      stop = true;
      const served = await Promise.all(loads);
      expect(served.every((n) => n > 0)).toBe(true);
      expect(failures.length).toBeGreaterThan(0);
      for (const f of failures) {
        expect(f.status).toBe(503);
        expect(f.body).toEqual({ message: expect.stringContaining('The database does not answer') });
        expect(f.ms).toBeLessThan(2500);
      }
      // Both nodes are whole: they serve reads and writes again.
      for (const n of [a, b]) expect((await ask(n, 'POST', '/v2/apps', { name: `after-${n.port}` })).status).toBe(200);
      expect(a.proc.exitCode).toBeNull();
      expect(b.proc.exitCode).toBeNull();
    }, 60_000);
  });
}
