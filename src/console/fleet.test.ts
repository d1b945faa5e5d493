/**
 * The Fleet view's server side: the exposition reader on hostile and
 * well-formed text, a node's figures from real registries' text, and the
 * readings over real loopback sockets (refused, slow, too large, shared).
 */
import { createServer, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterEach, describe, expect, it } from 'vitest';
import type { ResourceTracker } from '../agent/index.js';
import { Metrics } from '../telemetry/index.js';
import { ExpositionReader, parseExposition, parseSampleLine } from './exposition.js';
import { Fleet, nodeFigures } from './fleet.js';

const wanted = (...names: string[]): ReadonlySet<string> => new Set(names);

describe('the exposition reader', () => {
  it('reads names, escaped label values and the special values', () => {
    expect(parseSampleLine('up{a="x\\"y\\\\z\\n",b=""} 1.5e3 1700000000')).toEqual({ name: 'up', sample: { labels: { a: 'x"y\\z\n', b: '' }, value: 1500 } });
    expect(parseSampleLine('g +Inf')?.sample.value).toBe(Infinity);
    expect(parseSampleLine('g NaN')?.sample.value).toBeNaN();
    expect(parseSampleLine('g 0x10')?.sample.value).toBeNaN();
    for (const bad of ['{a="b"} 1', 'g{a="b} 1', 'g{a=b} 1', 'g', 'g 1 2 3', 'g{="x"} 1']) expect(parseSampleLine(bad), bad).toBeUndefined();
  });

  it('keeps only the families asked for; a declared family without samples is empty, an unnamed one absent', () => {
    const e = parseExposition(
      ['# HELP fn_running Calls', '# TYPE fn_running gauge', '# TYPE other gauge', 'other 5', 'fn_queued{fn_id="f"} 2', 'broken{ 1', '# a comment'].join('\n'),
      wanted('fn_running', 'fn_queued', 'fn_util_mem_used'),
    );
    expect(Object.fromEntries(e)).toEqual({ fn_running: [], fn_queued: [{ labels: { fn_id: 'f' }, value: 2 }] });
  });

  it('takes the text in any pieces, skips a line past its bound, and keeps a bounded number of samples and label characters', () => {
    const reader = new ExpositionReader(wanted('a', 'b'), { maxLineChars: 40, maxSamples: 2, maxLabelChars: 4 });
    const text = `a{x="1"} 1\na{x="${'y'.repeat(100)}"} 2\na{x="123456"} 3\na 4\nb 5`;
    for (let i = 0; i < text.length; i += 3) reader.write(text.slice(i, i + 3));
    const e = reader.end();
    expect(e.get('a')).toEqual([
      { labels: { x: '1' }, value: 1 },
      { labels: { x: '1234' }, value: 3 },
    ]);
    expect(e.get('b')).toEqual([{ labels: {}, value: 5 }]);
  });
});

/** A resource tracker as Metrics reads it: 256 MiB reserved of 1 GiB. */
const resources = {
  snapshot: () => ({
    memory: { syncTotal: 256 << 20, asyncTotal: 768 << 20, syncUsed: 0, asyncUsed: 256 << 20 },
    cpu: { syncTotal: 400, asyncTotal: 1600, syncUsed: 0, asyncUsed: 100 },
  }),
} as unknown as ResourceTracker;

const figuresOf = async (m: Metrics) => {
  const reader = new ExpositionReader(new Set([...m.registry.getMetricsAsArray().map((x) => x.name)]));
  reader.write(await m.text());
  return nodeFigures(reader.end());
};

describe("a node's figures", () => {
  it("a pure runner's: calls, memory and containers by state, 0 where counted and none there", async () => {
    const m = new Metrics({ role: 'pure-runner', version: '1.2.3' });
    m.watchResources(resources);
    const ref = { id: 'c1', appId: 'a', fnId: 'f' };
    m.onContainerState(ref, undefined, 'start', 0);
    m.onContainerState(ref, 'start', 'busy', 5);
    m.onContainerState({ ...ref, id: 'c2' }, undefined, 'idle', 0);
    const f = await figuresOf(m);
    expect(f).toMatchObject({ role: 'pure-runner', version: '1.2.3', calls_running: 0, calls_waiting: 0, memory: { used_bytes: 256 << 20, total_bytes: 1 << 30 } });
    expect(f.containers).toEqual({ starting: 0, busy: 1, idle: 1, paused: 0, waiting: 0 });
    expect(f).toMatchObject({ runners: null, groups: null, lbs: null });
  });

  it("an LB's: the runners it places on, up or held down; no calls, memory or containers of its own", async () => {
    const m = new Metrics({ role: 'lb', version: '1' });
    m.watchRunners(() => [
      { address: '10.0.0.5:9190', up: true },
      { address: '10.0.0.6:9190', up: false },
    ]);
    m.onPlaced('f', '10.0.0.5:9190', 1, 3);
    m.onPlaced('f', '10.0.0.5:9190', 1, 3);
    const f = await figuresOf(m);
    expect(f.runners).toEqual([
      { address: '10.0.0.5:9190', up: true, placed: 2 },
      { address: '10.0.0.6:9190', up: false, placed: 0 },
    ]);
    expect(f).toMatchObject({ role: 'lb', calls_running: null, memory: null, containers: null, groups: null });
  });

  it("a pool manager's groups, target and runners by state; a node that is not fnts shows what it reported", () => {
    const text = [
      'fnts_build_info{version="1",role="poolmanager"} 1',
      'fnts_pool_runners{group="default",state="active"} 2',
      'fnts_pool_runners{group="default",state="starting"} 1',
      'fnts_pool_runners{group="big",state="active"} 0',
      'fnts_pool_target_runners{group="default"} 3',
      'fnts_pool_lbs 2',
    ].join('\n');
    const f = nodeFigures(parseExposition(text, new Set(['fnts_build_info', 'fnts_pool_runners', 'fnts_pool_target_runners', 'fnts_pool_lbs'])));
    expect(f.groups).toEqual([
      { group: 'big', target: null, runners: { active: 0 } },
      { group: 'default', target: 3, runners: { active: 2, starting: 1 } },
    ]);
    expect(f.lbs).toBe(2);
    const fn = nodeFigures(parseExposition('fn_running{fn_id="x"} 2\n', new Set(['fn_running', 'fn_util_mem_used'])));
    expect(fn).toMatchObject({ role: null, calls_running: 2, calls_waiting: null, memory: null, containers: null });
  });
});

describe('reading the fleet', () => {
  const servers: Server[] = [];
  let fleet: Fleet | undefined;
  afterEach(async () => {
    fleet?.close();
    for (const s of servers) s.closeAllConnections();
    await Promise.all(servers.splice(0).map((s) => new Promise((r) => s.close(r))));
  });

  /** A node on loopback answering each /metrics request with `answer`. */
  const node = async (answer: (res: ServerResponse, n: number) => void): Promise<{ url: string; requests: () => number }> => {
    let n = 0;
    const s = createServer((req, res) => {
      if (req.url !== '/metrics') return void res.writeHead(404).end();
      answer(res, ++n);
    });
    servers.push(s);
    await new Promise<void>((r) => s.listen(0, '127.0.0.1', r));
    return { url: `http://127.0.0.1:${(s.address() as AddressInfo).port}`, requests: () => n };
  };

  it('says in words why a node is down: refused, too slow, an error status, too large', async () => {
    const closed = await node(() => undefined);
    await new Promise((r) => servers.pop()!.close(r));
    // localhost: 127.0.0.1, or ::1 as well (then Node fails with an AggregateError without a message: each address's refusal is said).
    const localhost = closed.url.replace('127.0.0.1', 'localhost');
    const slow = await node((res) => setTimeout(() => res.end('fn_running 1\n'), 1000).unref());
    const failing = await node((res) => res.writeHead(503).end('no'));
    const huge = await node((res) => res.end('#'.repeat(5000)));
    fleet = new Fleet({ urls: [closed.url, localhost, slow.url, failing.url, huge.url], timeoutMs: 200, maxBytes: 4096 });
    const nodes = await fleet.report();
    expect(nodes.map((n) => [n.up, n.error])).toEqual([
      [false, expect.stringMatching(/^not reachable: connect ECONNREFUSED 127\.0\.0\.1:\d+$/)],
      [false, expect.stringMatching(/^not reachable: connect ECONNREFUSED (::1|127\.0\.0\.1):\d+(; connect ECONNREFUSED (::1|127\.0\.0\.1):\d+)?$/)],
      [false, 'no answer within 0.2 s'],
      [false, 'its /metrics answered 503 Service Unavailable'],
      [false, 'its /metrics is larger than 4 KiB: not read'],
    ]);
    expect(nodes.every((n) => n.answered_at === null && n.role === null && n.memory === null)).toBe(true);
  });

  it('shares one reading among viewers, reads again only when it is older than maxAgeMs, and keeps when a node last answered', async () => {
    let now = 1_000_000;
    let up = true;
    const runner = await node((res) => (up ? res.end('fnts_build_info{version="1",role="pure-runner"} 1\nfn_running{fn_id="f"} 3\n') : res.socket?.destroy()));
    fleet = new Fleet({ urls: [runner.url], maxAgeMs: 1000, now: () => now });
    const [a, b] = await Promise.all([fleet.report(), fleet.report()]);
    expect(a).toEqual(b);
    expect(runner.requests()).toBe(1);
    expect(a[0]).toMatchObject({ up: true, error: null, role: 'pure-runner', calls_running: 3, answered_at: new Date(now).toISOString() });
    now += 500;
    await fleet.report();
    expect(runner.requests()).toBe(1);
    now += 600;
    up = false;
    const [down] = await fleet.report();
    expect(runner.requests()).toBe(2);
    expect(down).toMatchObject({ up: false, error: expect.stringMatching(/^not reachable: /), role: null, calls_running: null, answered_at: new Date(1_000_000).toISOString() });
  });

  it('reads nothing after close', async () => {
    const runner = await node((res) => res.end(''));
    fleet = new Fleet({ urls: [runner.url] });
    fleet.close();
    expect(await fleet.report()).toMatchObject([{ up: null, error: null }]);
    expect(runner.requests()).toBe(0);
  });
});
