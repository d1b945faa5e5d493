/**
 * Burst benchmark: 40 concurrent calls of 200 ms arrive at once at a fresh
 * function (no container yet), under both launch policies, measured in the
 * same run on real containers. What a burst costs: containers started (most
 * of a rule's excess starts serve no call), calls per container, and the
 * calls' latency.
 *
 *   npm run bench:burst            (BURST_CALLS=40 BURST_SLEEP_MS=200 BURST_ROUNDS=3)
 *
 * Each round uses a new fn on a running server, alternating the policies so
 * that both meet the same machine state; the figures are the rounds' medians.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { probeImage } from '../test/support/functions.js';
import { docker } from '../test/support/images.js';
import { startFnts, type FntsProcess } from '../test/support/process.js';
import { withTestToken } from '../test/support/auth.js';

const CALLS = Number(process.env['BURST_CALLS'] ?? 40);
const SLEEP_MS = Number(process.env['BURST_SLEEP_MS'] ?? 200);
const ROUNDS = Number(process.env['BURST_ROUNDS'] ?? 3);
const POLICIES = ['adaptive', 'seed'] as const;
type Policy = (typeof POLICIES)[number];

interface Round {
  started: number;
  served: number;
  p50: number;
  p99: number;
  max: number;
  errors: number;
}

async function post(url: string, body: unknown): Promise<{ status: number; json: any; ms: number }> {
  const t0 = performance.now();
  const res = await fetch(url, { method: 'POST', body: JSON.stringify(body), headers: withTestToken(url, { 'content-type': 'application/json' }) });
  const text = await res.text();
  let json: unknown;
  try {
    json = JSON.parse(text);
  } catch {
    json = undefined;
  }
  return { status: res.status, json, ms: performance.now() - t0 };
}

function quantile(xs: number[], q: number): number {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.ceil(q * s.length) - 1)]!;
}

const median = (xs: number[]): number => quantile(xs, 0.5);

async function burst(fnts: FntsProcess, appId: string, image: string, name: string): Promise<Round> {
  const fn = (await post(`${fnts.url}/v2/fns`, { app_id: appId, name, image })).json;
  const answers = await Promise.all(Array.from({ length: CALLS }, () => post(`${fnts.url}/invoke/${fn.id}`, { sleep: SLEEP_MS })));
  const ok = answers.filter((a) => a.status === 200);
  const started = (await docker().listContainers({ all: true, filters: { label: [`fnts.fn_id=${fn.id}`] } })).length;
  const latencies = answers.map((a) => a.ms);
  // Remove this round's containers so that the next round starts from the same state.
  await fetch(`${fnts.url}/v2/fns/${fn.id}`, { method: 'DELETE' });
  for (let i = 0; i < 300; i++) {
    if ((await docker().listContainers({ all: true, filters: { label: [`fnts.fn_id=${fn.id}`] } })).length === 0) break;
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
  return {
    started,
    served: new Set(ok.map((a) => a.json.hostname)).size,
    p50: quantile(latencies, 0.5),
    p99: quantile(latencies, 0.99),
    max: Math.max(...latencies),
    errors: answers.length - ok.length,
  };
}

async function main(): Promise<void> {
  process.stderr.write('bench: building the probe image...\n');
  const image = await probeImage();
  const servers = new Map<Policy, { fnts: FntsProcess; appId: string; dir: string }>();
  const rounds = new Map<Policy, Round[]>(POLICIES.map((p) => [p, []]));
  try {
    for (const policy of POLICIES) {
      const dir = mkdtempSync(join(tmpdir(), 'fnts-burst-'));
      const fnts = await startFnts({ FN_DB_URL: `sqlite3://${join(dir, 'fn.db')}`, FN_LOG_LEVEL: 'info', FNTS_LAUNCH_POLICY: policy });
      const appId = (await post(`${fnts.url}/v2/apps`, { name: 'burst' })).json.id;
      servers.set(policy, { fnts, appId, dir });
    }
    for (let r = 0; r < ROUNDS; r++) {
      for (const policy of r % 2 === 0 ? POLICIES : [...POLICIES].reverse()) {
        const { fnts, appId } = servers.get(policy)!;
        process.stderr.write(`bench: round ${r + 1}/${ROUNDS}, ${policy} launcher: ${CALLS} calls of ${SLEEP_MS} ms at once on a fresh fn...\n`);
        const round = await burst(fnts, appId, image, `f${r}`);
        process.stderr.write(`bench:   ${JSON.stringify(round, (_k, v: unknown) => (typeof v === 'number' ? Math.round(v) : v))}\n`);
        rounds.get(policy)!.push(round);
        // Let the engine settle after removing the round's containers.
        await new Promise((resolve) => setTimeout(resolve, 1000));
      }
    }
  } finally {
    for (const { fnts, dir } of servers.values()) {
      await fnts.stop();
      rmSync(dir, { recursive: true, force: true });
    }
  }

  const summary = (policy: Policy) => {
    const rs = rounds.get(policy)!;
    const pick = (k: keyof Round) => median(rs.map((x) => x[k]));
    return { started: pick('started'), served: pick('served'), p50: pick('p50'), p99: pick('p99'), errors: pick('errors') };
  };
  const a = summary('adaptive');
  const s = summary('seed');
  for (const [policy, f] of [
    ['adaptive', a],
    ['seed', s],
  ] as const) {
    process.stdout.write(
      `burst ${policy.padEnd(8)}: ${f.started} containers started (${f.served} served calls), ${(CALLS / f.started).toFixed(1)} calls per container, p50 ${Math.round(f.p50)} ms, p99 ${Math.round(f.p99)} ms, errors ${f.errors}\n`,
    );
  }
  process.stdout.write(`burst adaptive vs seed: ${((100 * a.started) / s.started).toFixed(0)}% of the containers, p99 ${(a.p99 / s.p99).toFixed(2)}x (goal: fewer containers, p99 no worse)\n`);
}

main().then(
  () => process.exit(0),
  (err: unknown) => {
    process.stderr.write(`bench failed: ${err instanceof Error ? err.stack : String(err)}\n`);
    process.exit(1);
  },
);
