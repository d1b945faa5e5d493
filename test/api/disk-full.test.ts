/**
 * A full disk under the database, for real: the server's data directory is
 * a small tmpfs, filled to the last byte while the server runs, then freed.
 * Meanwhile changes answer 503 naming the cause, /ready says the server is
 * not ready and why, calls still run, and their records wait in memory
 * until the disk has room, then are stored. Needs root (mount).
 */
import { execFileSync } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pino } from 'pino';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { probeImage } from '../support/functions.js';
import { startTestServer, type TestServer } from '../support/server.js';
import { eventually } from '../support/wait.js';

const data = mkdtempSync(join(tmpdir(), 'fnts-full-'));
const filler = join(data, 'filler');
let s: TestServer | undefined;
let probe: string;
const lines: Array<Record<string, unknown>> = [];

beforeAll(async () => {
  probe = await probeImage();
  execFileSync('mount', ['-t', 'tmpfs', '-o', 'size=16m', 'tmpfs', data]);
});
afterAll(async () => {
  await s?.close();
  execFileSync('umount', [data]);
  rmSync(data, { recursive: true, force: true });
});

/** Writes into the data directory until the disk has no byte left. */
function fill(): void {
  try {
    writeFileSync(filler, Buffer.alloc(64 * 1024 * 1024));
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== 'ENOSPC') throw err;
  }
}

const said = (pattern: RegExp): Array<Record<string, unknown>> => lines.filter((l) => pattern.test(String(l['msg'])));

it('answers 503 naming the full disk, is not ready, keeps call records in memory, and stores them once the disk has room', async () => {
  const logger = pino({ level: 'info' }, { write: (line: string) => void lines.push(JSON.parse(line) as Record<string, unknown>) });
  s = await startTestServer({ FN_DB_URL: `sqlite3://${join(data, 'fn.db')}`, FN_LOG_LEVEL: 'info' }, logger);
  const app = await s.app();
  const fn = await s.fn(app, probe);
  expect((await s.invoke(fn.id, {})).status).toBe(200);

  fill();
  const change = await s.call('/v2/apps', { body: { name: 'no-room' }, headers: { 'content-type': 'application/json' } });
  expect({ status: change.status, body: change.json }).toEqual({ status: 503, body: { message: "The database's disk is full, so the change was not saved; free space on it and try again" } });
  const ready = await s.call('/ready', { method: 'GET' });
  expect(ready.status).toBe(503);
  expect(ready.json.checks.datastore).toMatch(new RegExp(`^the database's disk is full \\(since .*\\): .* call records wait in memory; free space in ${data}$`));

  // Calls still run; their records wait.
  const ids: string[] = [];
  for (let i = 0; i < 3; i++) {
    const call = await s.invoke(fn.id, {});
    expect(call.status).toBe(200);
    ids.push(call.headers.get('fn-call-id')!);
  }
  expect(await eventually(() => said(/the database's disk is full: call records wait in memory until it has room \(\d+ records and logs waiting/).length > 0, 5000)).toBe(true);
  expect(said(/lost/)).toEqual([]);

  rmSync(filler);
  expect(await eventually(async () => (await s!.call('/ready', { method: 'GET' })).status === 200, 5000)).toBe(true);
  expect(
    await eventually(async () => {
      const listed = await s!.call(`/v2/fns/${fn.id}/calls`, { method: 'GET' });
      const stored = (listed.json?.items ?? []).map((c: { id: string }) => c.id);
      return ids.every((id) => stored.includes(id));
    }, 5000),
  ).toBe(true);
  expect(said(/the database has room again: the call records that waited in memory are stored \(\d+ records, \d+ logs\)/)).toHaveLength(1);
  expect((await s.call('/v2/apps', { body: { name: 'room-again' }, headers: { 'content-type': 'application/json' } })).status).toBe(200);
  expect(said(/lost/)).toEqual([]);
});
