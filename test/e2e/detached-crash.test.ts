/**
 * Detached calls are never lost: 300 accepted calls, the server SIGKILLed
 * twice while they run, restarted each time on the same data; every call
 * ends `success`. Redeliveries (calls a killed server had leased, which may
 * have run twice) are counted from the servers' own reports.
 *
 * Nor is an answered call lost when the kill lands in the middle of a group
 * commit (32 clients submitting at once): every 202 names a call that runs,
 * and each idempotency key, sent again after the restart, makes one call.
 *
 * Nor can one call keep its server in a crash loop: a call during which the
 * server dies on every delivery is dead-lettered after
 * FNTS_ASYNC_MAX_REDELIVERIES of them, and the server stays up.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import BetterSqlite3 from 'better-sqlite3';
import { afterAll, describe, expect, it } from 'vitest';
import { fnShowsTitle } from '../support/containers.js';
import { probeImage } from '../support/functions.js';
import { startFnts, type FntsProcess } from '../support/process.js';
import { eventually } from '../support/wait.js';
import { bearer } from '../support/auth.js';

const CALLS = 300;

/** The status of each call record of fn `fnId`, by call id, in the database at `dbPath`. */
function statusesOf(dbPath: string, fnId: string): Map<string, string> {
  const db = new BetterSqlite3(dbPath, { readonly: true });
  try {
    const rows = db.prepare('SELECT id, status FROM calls WHERE fn_id = ?').all(fnId) as Array<{ id: string; status: string }>;
    return new Map(rows.map((r) => [r.id, r.status]));
  } finally {
    db.close();
  }
}

/** Detached calls still to run in the database at `dbPath` (ready or leased). */
function remaining(dbPath: string): number {
  const db = new BetterSqlite3(dbPath, { readonly: true });
  try {
    return (db.prepare("SELECT count(*) AS n FROM mq WHERE state != 'dead'").get() as { n: number }).n;
  } finally {
    db.close();
  }
}

describe('detached calls across two crashes', () => {
  const dir = mkdtempSync(join(tmpdir(), 'fnts-crash-'));
  const dbPath = join(dir, 'fn.db');
  afterAll(() => rmSync(dir, { recursive: true, force: true }));

  const kill = async (p: FntsProcess): Promise<void> => {
    p.proc.kill('SIGKILL');
    await new Promise((r) => p.proc.once('exit', r));
  };

  it(`runs all ${CALLS} accepted calls to success`, async () => {
    const env = { FN_DB_URL: `sqlite3://${dbPath}` };
    let server = await startFnts(env);
    const post = async (path: string, body: unknown) => (await fetch(server.url + path, { method: 'POST', body: JSON.stringify(body), headers: bearer() })).json() as Promise<any>;
    const app = await post('/v2/apps', { name: 'crash' });
    const fn = await post('/v2/fns', { app_id: app.id, name: 'work', image: await probeImage() });

    const ids: string[] = [];
    for (let i = 0; i < CALLS; i += 20) {
      const batch = await Promise.all(
        Array.from({ length: Math.min(20, CALLS - i) }, async () => {
          const res = await fetch(`${server.url}/invoke/${fn.id}`, { method: 'POST', headers: { 'Fn-Invoke-Type': 'detached' }, body: JSON.stringify({ sleep: 100 }) });
          expect(res.status).toBe(202);
          return res.headers.get('fn-call-id')!;
        }),
      );
      ids.push(...batch);
    }
    expect(new Set(ids).size).toBe(CALLS);

    let output = '';
    // Killed twice while calls run: once a sixth of them are done, then once half are.
    for (const left of [Math.floor((CALLS * 5) / 6), Math.floor(CALLS / 2)]) {
      expect(await eventually(() => remaining(dbPath) <= left, 60_000, 50)).toBe(true);
      output += server.output();
      await kill(server);
      server = await startFnts(env);
    }
    try {
      expect(await eventually(() => remaining(dbPath) === 0, 120_000, 200)).toBe(true);
      // Records are written in batches: give the last one its moment.
      expect(await eventually(() => [...statusesOf(dbPath, fn.id).values()].filter((s) => s === 'success').length === CALLS, 10_000)).toBe(true);
      const statuses = statusesOf(dbPath, fn.id);
      expect(ids.filter((id) => statuses.get(id) !== 'success')).toEqual([]);
    } finally {
      output += server.output();
      await server.stop();
    }
    const redelivered = [...output.matchAll(/"released":(\d+)/g)].reduce((n, m) => n + Number(m[1]), 0);
    // Reported, not asserted: at most the calls the killed servers held at the time.
    process.stdout.write(`detached crash test: ${CALLS} calls, 2 kills, ${redelivered} calls taken back from killed servers (each may have run twice)\n`);
  });
});

describe('a detached call whose server dies on every delivery (a poison call)', () => {
  const dir = mkdtempSync(join(tmpdir(), 'fnts-poison-'));
  afterAll(() => rmSync(dir, { recursive: true, force: true }));

  it('is dead-lettered after FNTS_ASYNC_MAX_REDELIVERIES deliveries, with the reason; the server stays up and can redrive it', async () => {
    // A call is cut at once by a stopping server (no drain): the test's last stop is quick.
    const env = { FN_DB_URL: `sqlite3://${join(dir, 'fn.db')}`, FNTS_ASYNC_MAX_REDELIVERIES: '2', FNTS_DRAIN_TIMEOUT_MSECS: '0' };
    let server = await startFnts(env);
    const post = async (path: string, body: unknown) => (await fetch(server.url + path, { method: 'POST', body: JSON.stringify(body), headers: bearer() })).json() as Promise<any>;
    const app = await post('/v2/apps', { name: 'poison' });
    const fn = await post('/v2/fns', { app_id: app.id, name: 'killer', image: await probeImage() });
    // Stands in for a call that crashes the server: it is running when the server is killed, every time.
    const res = await fetch(`${server.url}/invoke/${fn.id}`, { method: 'POST', headers: { 'Fn-Invoke-Type': 'detached' }, body: JSON.stringify({ title: 'poison', sleep: 60_000 }) });
    expect(res.status).toBe(202);
    const id = res.headers.get('fn-call-id')!;
    const record = async (): Promise<any> => (await fetch(`${server.url}/v2/fns/${fn.id}/calls/${id}`, { headers: bearer() })).json();

    // Delivered, killed mid-call; delivered again after the restart, killed again.
    for (let delivery = 1; delivery <= 2; delivery++) {
      expect(await eventually(() => fnShowsTitle(fn.id, 'poison'), 20_000)).toBe(true);
      server.proc.kill('SIGKILL');
      await new Promise((r) => server.proc.once('exit', r));
      server = await startFnts(env);
    }
    try {
      // The third start does not run it: the call is dead, with why, and the server serves on.
      expect(await eventually(async () => (await record()).status === 'error', 10_000)).toBe(true);
      const dead = await record();
      expect(dead).toMatchObject({ status: 'error', attempts: 2 });
      expect(dead.error).toMatch(/stopped \(crashed or was killed\) during 2 of its deliveries \(FNTS_ASYNC_MAX_REDELIVERIES=2\)/);
      expect((await fetch(`${server.url}/health`)).status).toBe(200);
      expect(server.proc.exitCode).toBeNull();
      expect(server.output()).toMatch(/dead-lettered \(poison call\)/);
      // Once the cause is fixed, it can be sent round again.
      const retried = await fetch(`${server.url}/v2/fns/${fn.id}/calls/${id}/retry`, { method: 'POST', headers: bearer() });
      expect(retried.status).toBe(202);
    } finally {
      await server.stop();
    }
  });
});

describe('a server killed in the middle of a group commit of detached calls', () => {
  const dir = mkdtempSync(join(tmpdir(), 'fnts-group-kill-'));
  const dbPath = join(dir, 'fn.db');
  afterAll(() => rmSync(dir, { recursive: true, force: true }));
  const KEYS = 400;

  it('runs every call it answered 202, and queues one call per idempotency key, however the kill cut the batches', async () => {
    const env = { FN_DB_URL: `sqlite3://${dbPath}` };
    let server = await startFnts(env);
    // Listened for from the start: the kill may end the process before the clients are all done.
    const killedExit = new Promise((r) => server.proc.once('exit', r));
    const post = async (path: string, body: unknown) => (await fetch(server.url + path, { method: 'POST', body: JSON.stringify(body), headers: bearer() })).json() as Promise<any>;
    const app = await post('/v2/apps', { name: 'groups' });
    const fn = await post('/v2/fns', { app_id: app.id, name: 'work', image: await probeImage() });
    const submit = async (key: string): Promise<string | undefined> => {
      try {
        const res = await fetch(`${server.url}/invoke/${fn.id}`, { method: 'POST', headers: { 'Fn-Invoke-Type': 'detached', 'Fn-Idempotency-Key': key }, body: '{}' });
        return res.status === 202 ? res.headers.get('fn-call-id')! : undefined;
      } catch {
        return undefined; // cut by the kill: the client does not know
      }
    };

    // 32 clients at once, so batches are always being committed; killed once 150 are answered.
    const before = new Map<string, string>();
    let next = 0;
    let killed = false;
    const client = async (): Promise<void> => {
      while (!killed && next < KEYS) {
        const key = `k${next++}`;
        const id = await submit(key);
        if (id && !killed) before.set(key, id);
        if (before.size >= 150 && !killed) {
          killed = true;
          server.proc.kill('SIGKILL');
        }
      }
    };
    await Promise.all(Array.from({ length: 32 }, client));
    await killedExit;
    const cut = next - before.size;
    server = await startFnts(env);
    try {
      // Every key sent again (as a client does after an unknown outcome): the answered ones name their call again.
      const after = new Map<string, string>();
      for (let i = 0; i < KEYS; i += 32) {
        const keys = Array.from({ length: Math.min(32, KEYS - i) }, (_, j) => `k${i + j}`);
        const ids = await Promise.all(keys.map(submit));
        keys.forEach((k, j) => after.set(k, ids[j]!));
      }
      expect([...before].filter(([k, id]) => after.get(k) !== id)).toEqual([]);
      expect([...after.values()].filter((id) => id === undefined)).toEqual([]);
      expect(await eventually(() => remaining(dbPath) === 0, 120_000, 200)).toBe(true);
      // One call per key, each run to success: no call the server answered for was lost, none made twice.
      expect(await eventually(() => [...statusesOf(dbPath, fn.id).values()].filter((s) => s === 'success').length === KEYS, 20_000)).toBe(true);
      const rows = statusesOf(dbPath, fn.id);
      expect(rows.size).toBe(KEYS);
      expect(new Set(after.values()).size).toBe(KEYS);
      expect([...after.values()].filter((id) => rows.get(id) !== 'success')).toEqual([]);
      process.stdout.write(`group commit kill test: ${before.size} calls answered 202 before the kill, ${cut} requests cut by it or after it\n`);
    } finally {
      await server.stop();
    }
  }, 120_000);
});
