/**
 * GET /metrics on a real server with real containers: Prometheus' own
 * parser (promtool, from Debian's prometheus package, which .ci/run
 * installs) accepts the exposition, and Fn's series and ours are there and
 * move when calls run, time out, fail and start containers.
 */
import { spawnSync } from 'node:child_process';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { probeImage } from '../support/functions.js';
import { startTestServer, type TestServer } from '../support/server.js';

interface Sample {
  labels: Record<string, string>;
  value: number;
}
interface Family {
  type: string;
  samples: Map<string, Sample[]>;
}

/** The families of an exposition, with their samples by series name (enough to read values; promtool checks the format). */
function readExposition(text: string): Map<string, Family> {
  const families = new Map<string, Family>();
  let current: Family | undefined;
  for (const line of text.split('\n')) {
    const type = /^# TYPE (\S+) (\S+)$/.exec(line);
    if (type) {
      current = { type: type[2]!, samples: new Map() };
      families.set(type[1]!, current);
      continue;
    }
    if (line === '' || line.startsWith('#') || !current) continue;
    const m = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)$/.exec(line);
    if (!m) throw new Error(`unreadable sample line: ${line}`);
    const labels: Record<string, string> = {};
    for (const [, k, v] of (m[2] ?? '').matchAll(/([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"/g)) labels[k!] = v!;
    const list = current.samples.get(m[1]!) ?? [];
    list.push({ labels, value: Number(m[3]) });
    current.samples.set(m[1]!, list);
  }
  return families;
}

const promtool = spawnSync('promtool', ['--version']).status === 0;

describe('GET /metrics', () => {
  let s: TestServer;
  let fn: any;

  const scrape = async (): Promise<Map<string, Family>> => {
    const res = await fetch(`${s.url}/metrics`);
    expect(res.status).toBe(200);
    expect(res.headers.get('content-type')).toContain('text/plain');
    const text = await res.text();
    if (promtool) {
      // Prometheus' parser: format errors fail (lint hints about naming are Fn's names, kept on purpose).
      const check = spawnSync('promtool', ['check', 'metrics'], { input: text, encoding: 'utf8' });
      expect(check.stderr + check.stdout).not.toMatch(/error while linting|text format parsing error/i);
    }
    return readExposition(text);
  };
  /** The value of `name` (a histogram's count) for this test's fn; 0 when the series does not exist yet. */
  const ofFn = (families: Map<string, Family>, name: string, extra: Record<string, string> = {}): number => {
    const family = families.get(name);
    const series = family?.samples.get(family.type === 'histogram' ? `${name}_count` : name) ?? [];
    const m = series.find((x) => x.labels['fn_id'] === fn.id && Object.entries(extra).every(([k, v]) => x.labels[k] === v));
    return m?.value ?? 0;
  };

  beforeAll(async () => {
    s = await startTestServer();
    const app = await s.app();
    fn = await s.fn(app, await probeImage(), { timeout: 1 });
  });
  afterAll(async () => {
    await s?.close();
  });

  it("serves Fn's series and ours, and they move with calls", async () => {
    const before = await scrape();
    for (const name of ['fn_calls', 'fn_util_mem_avail', 'fn_util_cpu_avail', 'fnts_build_info', 'fnts_mq_depth', 'fnts_mq_oldest_age_seconds', 'process_cpu_seconds_total']) {
      expect(before.has(name), name).toBe(true);
    }
    expect(ofFn(before, 'fn_calls')).toBe(0);

    expect((await s.invoke(fn.id, { log: 'one' })).status).toBe(200);
    expect((await s.invoke(fn.id, {})).status).toBe(200);
    expect((await s.invoke(fn.id, { sleep: 1500 })).status).toBe(504);
    expect((await s.invoke(fn.id, { exit: 3 })).status).toBe(502);
    expect((await s.invoke(fn.id, {})).status).toBe(200);

    const after = await scrape();
    expect(ofFn(after, 'fn_calls')).toBe(5);
    expect(ofFn(after, 'fn_completed')).toBe(3);
    expect(ofFn(after, 'fn_timeouts')).toBe(1);
    expect(ofFn(after, 'fn_errors')).toBe(1);
    expect(ofFn(after, 'fn_queued')).toBe(0);
    expect(ofFn(after, 'fn_running')).toBe(0);
    // The timeout and the crash each end their container, so the calls after them start one: three starts.
    expect(ofFn(after, 'faas_coldstarts_total')).toBe(3);
    expect(ofFn(after, 'faas_init_duration_seconds')).toBe(3);
    expect(ofFn(after, 'faas_invoke_duration_seconds', { status: 'success' })).toBe(3);
    expect(ofFn(after, 'faas_invoke_duration_seconds', { status: 'timeout' })).toBe(1);
    expect(ofFn(after, 'fnts_call_wait_duration_seconds')).toBe(5);
    expect(ofFn(after, 'fnts_container_retirements_total', { reason: 'timed-out' })).toBe(1);
    expect(ofFn(after, 'fnts_container_retirements_total', { reason: 'failed' })).toBe(1);
    // The one container left is idle (or already paused), none is busy.
    expect(ofFn(after, 'fn_container_idle_total') + ofFn(after, 'fn_container_paused_total')).toBe(1);
    expect(ofFn(after, 'fn_container_busy_total')).toBe(0);
    expect(ofFn(after, 'fn_container_busy_duration_seconds')).toBeGreaterThanOrEqual(5);

    // The wait histogram's buckets are cumulative and end at +Inf = count.
    const buckets = after
      .get('fnts_call_wait_duration_seconds')!
      .samples.get('fnts_call_wait_duration_seconds_bucket')!
      .filter((b) => b.labels['fn_id'] === fn.id);
    expect(buckets.map((b) => b.value)).toEqual([...buckets.map((b) => b.value)].sort((a, b) => a - b));
    expect(buckets.at(-1)).toMatchObject({ labels: { le: '+Inf' }, value: 5 });

    // API latency is kept under route templates, never raw URLs.
    const api = after
      .get('fn_api_latency')!
      .samples.get('fn_api_latency_count')!
      .map((m) => m.labels['path']);
    expect(api).toContain('/invoke/:fnID');
    expect(api).toContain('/v2/fns');
    expect(api.some((p) => p?.includes(fn.id))).toBe(false);
    // Memory is reserved for the idle container.
    expect(after.get('fn_util_mem_used')!.samples.get('fn_util_mem_used')![0]!.value).toBeGreaterThan(0);
  });
});
