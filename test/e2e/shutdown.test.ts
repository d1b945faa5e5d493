/**
 * Stopping the real server the ways users and supervisors do: SIGTERM to
 * `npm start`, one or two signals during a burst, a container that cannot
 * start. It always stops within its bound and leaves no container behind,
 * and a failed start never ends it.
 */
import { spawn } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { containersOfOwner, fnShowsTitle, ownerOf } from '../support/containers.js';
import { missingEntrypointImage, probeImage } from '../support/functions.js';
import { startFnts, type FntsProcess } from '../support/process.js';
import { testRunTag } from '../support/tag.js';
import { eventually } from '../support/wait.js';
import { withTestToken } from '../support/auth.js';

const root = join(dirname(fileURLToPath(import.meta.url)), '..', '..');
const dir = mkdtempSync(join(tmpdir(), 'fnts-stop-'));
let probe: string;
let noEntrypoint: string;
beforeAll(async () => {
  [probe, noEntrypoint] = await Promise.all([probeImage(), missingEntrypointImage()]);
});
afterAll(() => rmSync(dir, { recursive: true, force: true }));

const owned = (dbUrl: string) => containersOfOwner(ownerOf(dbUrl));

async function post(url: string, body: unknown): Promise<{ status: number; body: any }> {
  const res = await fetch(url, { method: 'POST', body: JSON.stringify(body), headers: withTestToken(url, { 'content-type': 'application/json' }) });
  const text = await res.text();
  return { status: res.status, body: text ? JSON.parse(text) : undefined };
}

/** A fn of the probe image on a fresh app of `fnts`. */
async function probeFn(fnts: FntsProcess, name: string, image = probe): Promise<any> {
  const app = (await post(`${fnts.url}/v2/apps`, { name })).body;
  return (await post(`${fnts.url}/v2/fns`, { app_id: app.id, name: 'f', image })).body;
}

/** A call that may be cut by the shutdown: its status, or 0 when the connection closed first. */
const settle = (p: Promise<{ status: number }>) =>
  p.then(
    (r) => r.status,
    () => 0,
  );

describe('stopping the server', () => {
  it('stops the server when a supervisor sends SIGTERM to `npm start`', async () => {
    const dbUrl = `sqlite3://${join(dir, 'npm', 'fn.db')}`;
    const npm = spawn('npm', ['start'], {
      cwd: root,
      env: { ...process.env, ...testRunTag(), FN_PORT: '0', FN_LISTEN_HOST: '127.0.0.1', FN_DB_URL: dbUrl, FN_LOG_LEVEL: 'info' },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let output = '';
    npm.stdout.on('data', (b: Buffer) => (output += b.toString()));
    npm.stderr.on('data', (b: Buffer) => (output += b.toString()));
    const exited = new Promise<number | null>((resolve) => npm.on('exit', (code) => resolve(code)));
    expect(await eventually(() => /fnts serving on :\d+/.test(output), 30_000, 50)).toBe(true);
    const url = `http://127.0.0.1:${/fnts serving on :(\d+)/.exec(output)![1]}`;
    expect((await fetch(`${url}/version`)).status).toBe(200);

    npm.kill('SIGTERM');
    expect(await exited).toBe(0);
    // The server itself is gone, not orphaned and still holding the port.
    expect(
      await eventually(
        () =>
          fetch(`${url}/version`).then(
            () => false,
            () => true,
          ),
        5000,
      ),
    ).toBe(true);
    // Its last line (read from the pipe, which may come after npm's exit).
    expect(await eventually(() => output.includes('fnts stopped'), 5000)).toBe(true);
  }, 60_000);

  it('on a second SIGTERM during a burst, cuts the calls and still removes every container, those starting included', async () => {
    const dbUrl = `sqlite3://${join(dir, 'twice', 'fn.db')}`;
    const fnts = await startFnts({ FN_DB_URL: dbUrl });
    const fn = await probeFn(fnts, 'twice');
    const calls = Array.from({ length: 12 }, () => settle(post(`${fnts.url}/invoke/${fn.id}`, { sleep: 8000 })));
    expect(await eventually(async () => (await owned(dbUrl)).length > 0, 10_000, 20)).toBe(true);
    const t0 = Date.now();
    fnts.proc.kill('SIGTERM');
    // The second signal once the first is heard, not both at once.
    expect(await eventually(() => fnts.output().includes('shutting down: calls in flight'), 5000, 20)).toBe(true);
    const code = fnts.stop('SIGTERM');
    expect(await code).toBe(0);
    expect(Date.now() - t0).toBeLessThan(6000);
    for (const status of await Promise.all(calls)) expect([0, 503]).toContain(status);
    expect(await owned(dbUrl)).toEqual([]);
  }, 60_000);

  it('cuts calls still running after FNTS_DRAIN_TIMEOUT_MSECS and removes every container', async () => {
    const DRAIN_MS = 1500;
    const dbUrl = `sqlite3://${join(dir, 'drain', 'fn.db')}`;
    const fnts = await startFnts({ FN_DB_URL: dbUrl, FNTS_DRAIN_TIMEOUT_MSECS: String(DRAIN_MS) });
    const quickFn = await probeFn(fnts, 'quick');
    const slowFn = await probeFn(fnts, 'slow');
    // Warm: both calls below find a container at once and are running when the signal comes.
    expect((await post(`${fnts.url}/invoke/${quickFn.id}`, {})).status).toBe(200);
    expect((await post(`${fnts.url}/invoke/${slowFn.id}`, {})).status).toBe(200);
    const quick = post(`${fnts.url}/invoke/${quickFn.id}`, { title: 'quick', sleep: 500 });
    const slow = post(`${fnts.url}/invoke/${slowFn.id}`, { title: 'slow', sleep: 20_000 });
    expect(await eventually(async () => (await fnShowsTitle(quickFn.id, 'quick')) && (await fnShowsTitle(slowFn.id, 'slow')), 5000, 20)).toBe(true);
    const t0 = Date.now();
    const code = fnts.stop('SIGTERM');
    // A call that ends within the drain time is answered as usual.
    expect((await quick).status).toBe(200);
    const cut = await slow;
    expect(cut).toEqual({ status: 503, body: { message: 'Service is shutting down' } });
    expect(Date.now() - t0).toBeGreaterThanOrEqual(DRAIN_MS - 100);
    expect(await code).toBe(0);
    expect(Date.now() - t0).toBeLessThan(6000);
    expect(await owned(dbUrl)).toEqual([]);
  }, 60_000);
});

describe('a container that cannot start, in the real server', () => {
  it('answers 502 and the server keeps serving past the start timeout', async () => {
    const dbUrl = `sqlite3://${join(dir, 'broken', 'fn.db')}`;
    const START_TIMEOUT_MS = 300;
    const fnts = await startFnts({ FN_DB_URL: dbUrl, FN_HOT_START_TIMEOUT_MSECS: String(START_TIMEOUT_MS) });
    try {
      const broken = await probeFn(fnts, 'broken', noEntrypoint);
      const fine = await probeFn(fnts, 'fine');
      expect((await post(`${fnts.url}/invoke/${broken.id}`, {})).status).toBe(502);
      // This call (its own start, then as long as the start timeout) spans the
      // moment the failed start's timer used to fire and end the process.
      expect((await post(`${fnts.url}/invoke/${fine.id}`, { sleep: START_TIMEOUT_MS })).status).toBe(200);
      expect((await fetch(`${fnts.url}/version`)).status).toBe(200);
    } finally {
      expect(await fnts.stop()).toBe(0);
    }
    expect(await owned(dbUrl)).toEqual([]);
  }, 60_000);
});
