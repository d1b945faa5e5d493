/**
 * The databases benchmark: the same fnts full node on SQLite, Postgres and
 * MariaDB (real servers, started as the tests start them), in one run:
 * sync invokes at 1 and 16 connections with call records on (the default),
 * detached calls accepted per second (each stored before its 202), and how
 * long a change made on one node takes to reach a second node on the same
 * database (p50 and p99 over 100 changes, read from the second node's
 * GET /v2/runner/changes long poll). Ratios are against SQLite in the
 * same run.
 *
 *   npm run bench:databases            (BENCH_SECONDS=5 by default)
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { randomBytes } from 'node:crypto';
import { bearer, withTestToken } from '../test/support/auth.js';
import { DATABASE_KINDS, startDatabase, type DatabaseKind } from '../test/support/databases.js';
import { ensureFunctionImage, HELLO_FUNC_JS } from '../test/support/images.js';
import { startFnts, type FntsProcess } from '../test/support/process.js';
import { cannon, fmt, json, quantile, type Figures } from './measure.mjs';

const SECONDS = Number(process.env['BENCH_SECONDS'] ?? 5);
const BODY = JSON.stringify({ name: 'bench' });
const CHANGES = 100;

interface Row {
  kind: DatabaseKind;
  sync1: Figures;
  sync16: Figures;
  accepted: Figures;
  changeP50: number;
  changeP99: number;
}

/** How long a change made on `a` takes to show on `b`'s change feed (what its LBs and caches act on). */
async function propagation(a: FntsProcess, b: FntsProcess, fnId: string): Promise<number[]> {
  const feed = `${b.url}/v2/runner/changes`;
  let cursor = (await json(`${feed}?wait=0`)).cursor as string;
  const times: number[] = [];
  for (let i = 0; i < CHANGES; i++) {
    const waiting = fetch(`${feed}?after=${encodeURIComponent(cursor)}&wait=5000`, { headers: withTestToken(feed) }).then((r) => r.json());
    const at = performance.now();
    await fetch(`${a.url}/v2/fns/${fnId}`, { method: 'PUT', headers: { ...bearer(), 'content-type': 'application/json' }, body: JSON.stringify({ config: { ROUND: String(i) } }) });
    const answer = (await waiting) as { cursor: string; changes: unknown[] };
    times.push(performance.now() - at);
    cursor = answer.cursor;
  }
  return times;
}

async function measure(kind: DatabaseKind, image: string): Promise<Row> {
  const server = await startDatabase(kind);
  const dirs: string[] = [];
  const nodes: FntsProcess[] = [];
  try {
    const url = await server.newDatabase();
    const key = randomBytes(32).toString('hex');
    const start = async (): Promise<FntsProcess> => {
      const dir = mkdtempSync(join(tmpdir(), 'fnts-bench-db-'));
      dirs.push(dir);
      const n = await startFnts({ FN_DB_URL: url, FNTS_SECRET_KEY: key, FNTS_DATA_DIR: dir, FN_LOG_LEVEL: 'info' }, { timeoutMs: 60_000 });
      nodes.push(n);
      return n;
    };
    const a = await start();
    const app = await json(`${a.url}/v2/apps`, { name: 'bench' });
    const fn = await json(`${a.url}/v2/fns`, { app_id: app.id, name: 'hello', image });
    const invoke = `${a.url}/invoke/${fn.id}`;
    await cannon({ url: invoke, body: BODY, seconds: 2, connections: 4 });
    const sync1 = await cannon({ url: invoke, body: BODY, seconds: SECONDS, connections: 1 });
    const sync16 = await cannon({ url: invoke, body: BODY, seconds: SECONDS, connections: 16 });
    const accepted = await cannon({ url: invoke, body: BODY, seconds: SECONDS, connections: 16, headers: { 'Fn-Invoke-Type': 'detached' } });
    const b = await start();
    const times = await propagation(a, b, fn.id);
    return { kind, sync1, sync16, accepted, changeP50: quantile(times, 0.5), changeP99: quantile(times, 0.99) };
  } finally {
    for (const n of nodes) await n.stop().catch(() => undefined);
    await server.stop();
    for (const d of dirs) rmSync(d, { recursive: true, force: true });
  }
}

async function main(): Promise<void> {
  process.stderr.write('bench: building the function image...\n');
  const image = await ensureFunctionImage('hello', HELLO_FUNC_JS);
  const rows: Row[] = [];
  for (const kind of DATABASE_KINDS) {
    process.stderr.write(`bench: ${kind}: starting the database and a node, then ${SECONDS} s runs at 1 and 16 connections, detached accepts, ${CHANGES} changes...\n`);
    rows.push(await measure(kind, image));
  }
  const base = rows[0]!;
  const ratio = (x: number, y: number): string => (y > 0 ? `${fmt(x / y, 2)}x` : '-');
  console.log('\ndatabase   sync/s @1 (p99)      sync/s @16 (p99)      detached 202/s @16 (p99)   change to other node p50 / p99   errors');
  for (const r of rows) {
    const errors = [r.sync1, r.sync16, r.accepted].reduce((n, f) => n + f.errors + f.non2xx, 0);
    console.log(
      `${r.kind.padEnd(10)} ${fmt(r.sync1.rps).padStart(6)} (${r.sync1.p99} ms) ${ratio(r.sync1.rps, base.sync1.rps).padStart(6)}   ` +
        `${fmt(r.sync16.rps).padStart(6)} (${r.sync16.p99} ms) ${ratio(r.sync16.rps, base.sync16.rps).padStart(6)}   ` +
        `${fmt(r.accepted.rps).padStart(6)} (${r.accepted.p99} ms) ${ratio(r.accepted.rps, base.accepted.rps).padStart(6)}        ` +
        `${fmt(r.changeP50, 1).padStart(6)} / ${fmt(r.changeP99, 1)} ms              ${errors}`,
    );
  }
  console.log("\nratios: against SQLite in the same run. Change times: a PUT on one node until the other node's change feed answers (what its caches and LBs act on).");
}

await main();
