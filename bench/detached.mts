/**
 * Detached calls benchmark: how fast fnts accepts detached calls (202/s at
 * 16 connections, each persisted before its answer), how fast the queue
 * drains through real hot containers, and what a backlog of 1,000 queued
 * calls does to synchronous calls (p99 at 16 connections, measured in the
 * same run without and with the backlog).
 *
 *   npm run bench:detached
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import autocannon from 'autocannon';
import BetterSqlite3 from 'better-sqlite3';
import { ensureFunctionImage, HELLO_FUNC_JS } from '../test/support/images.js';
import { startFnts, type FntsProcess } from '../test/support/process.js';
import { withTestToken } from '../test/support/auth.js';

const BODY = JSON.stringify({ name: 'bench' });
const BACKLOG = 1000;

async function json(url: string, body?: unknown): Promise<any> {
  const res = await fetch(
    url,
    body === undefined ? { headers: withTestToken(url) } : { method: 'POST', body: JSON.stringify(body), headers: withTestToken(url, { 'content-type': 'application/json' }) },
  );
  return res.json();
}

async function cannon(url: string, opts: { connections: number; seconds?: number; amount?: number; headers?: Record<string, string> }) {
  const r = await autocannon({
    url,
    method: 'POST',
    body: BODY,
    headers: { 'content-type': 'application/json', ...opts.headers },
    connections: opts.connections,
    ...(opts.amount ? { amount: opts.amount } : { duration: opts.seconds ?? 5 }),
  });
  return {
    rps: r.requests.average,
    p50: r.latency.p50,
    p99: r.latency.p99,
    total: r.requests.total,
    non2xx: r.non2xx,
    errors: r.errors + r.timeouts,
    status: r.statusCodeStats as Record<string, { count: number }>,
  };
}

/** Detached calls still to run (ready or leased), read from the server's own database. */
function queued(db: BetterSqlite3.Database): number {
  return (db.prepare("SELECT count(*) AS n FROM mq WHERE state != 'dead'").get() as { n: number }).n;
}

async function main(): Promise<void> {
  process.stderr.write('bench: building images...\n');
  const image = await ensureFunctionImage('hello', HELLO_FUNC_JS);
  const dataDir = mkdtempSync(join(tmpdir(), 'fnts-bench-'));
  const dbPath = join(dataDir, 'fn.db');
  let fnts: FntsProcess | undefined;
  try {
    fnts = await startFnts({ FN_DB_URL: `sqlite3://${dbPath}`, FN_LOG_LEVEL: 'info' });
    const app = await json(`${fnts.url}/v2/apps`, { name: 'bench' });
    const syncFn = await json(`${fnts.url}/v2/fns`, { app_id: app.id, name: 'sync', image });
    const asyncFn = await json(`${fnts.url}/v2/fns`, { app_id: app.id, name: 'async', image });
    const db = new BetterSqlite3(dbPath, { readonly: true });
    const syncUrl = `${fnts.url}/invoke/${syncFn.id}`;
    const asyncUrl = `${fnts.url}/invoke/${asyncFn.id}`;
    const detached = { 'Fn-Invoke-Type': 'detached' };

    process.stderr.write('bench: sync baseline, 16 connections...\n');
    await cannon(syncUrl, { connections: 16, seconds: 3 });
    const base = await cannon(syncUrl, { connections: 16 });

    process.stderr.write('bench: detached accept rate, 16 connections...\n');
    const started = performance.now();
    const accept = await cannon(asyncUrl, { connections: 16, seconds: 5, headers: detached });
    const accepted = accept.status['202']?.count ?? 0;
    process.stderr.write('bench: draining...\n');
    const backlogAfterAccept = queued(db);
    while (queued(db) > 0) await new Promise((r) => setTimeout(r, 100));
    // Calls ran while others were still being accepted: the rate counts from the first acceptance.
    const drainS = (performance.now() - started) / 1000;

    process.stderr.write(`bench: ${BACKLOG} queued, sync at 16 connections meanwhile...\n`);
    await cannon(asyncUrl, { connections: 16, amount: BACKLOG, headers: detached });
    const during = await cannon(syncUrl, { connections: 16 });
    const left = queued(db);
    while (queued(db) > 0) await new Promise((r) => setTimeout(r, 100));
    db.close();

    const say = (line: string): void => void process.stdout.write(line + '\n');
    say(`detached accept: ${accept.rps.toFixed(0)} 202/s at 16 conn (p50 ${accept.p50} ms, p99 ${accept.p99} ms), ${accepted} accepted, ${accept.total - accepted} not`);
    say(
      `drain: all ${accepted} accepted calls ran within ${drainS.toFixed(1)} s of the first acceptance = ${(accepted / drainS).toFixed(0)} calls/s (${backlogAfterAccept} still queued when accepting stopped)`,
    );
    say(
      `sync at 16 conn: alone ${base.rps.toFixed(0)} req/s p99 ${base.p99} ms; with a ${BACKLOG}-call backlog draining ${during.rps.toFixed(0)} req/s p99 ${during.p99} ms (${left} still queued after it)`,
    );
  } finally {
    await fnts?.stop();
    rmSync(dataDir, { recursive: true, force: true });
  }
}

main().then(
  () => process.exit(0),
  (err: unknown) => {
    process.stderr.write(`bench failed: ${err instanceof Error ? err.stack : String(err)}\n`);
    process.exit(1);
  },
);
