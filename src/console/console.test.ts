/**
 * The console's server side: figures from a real metrics registry, the
 * pulse's one shared timer, the summary and the stream over a real port
 * (a stream never ends, so inject() cannot read it), and the page's headers.
 */
import { mkdtempSync, mkdirSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import Fastify, { type FastifyInstance } from 'fastify';
import { afterEach, describe, expect, it } from 'vitest';
import { pino } from 'pino';
import { TokenRegistry } from '../auth/index.js';
import { compileConfig } from '../config/index.js';
import { openSqlite, type SqlDatastore } from '../datastore/index.js';
import { buildServer } from '../server/index.js';
import { Metrics, Readiness } from '../telemetry/index.js';
import { registerConsole } from './console.js';
import { figuresBetween, quantileMs, readRegistry, type Reading } from './figures.js';
import { Pulse } from './pulse.js';

const buckets = (pairs: Array<[number, number]>): Map<number, number> => new Map(pairs);

describe('figures', () => {
  it('takes quantiles from the buckets counted between two readings, as histogram_quantile', () => {
    const before = buckets([
      [0.01, 10],
      [0.1, 10],
      [Infinity, 10],
    ]);
    // 100 more calls: 50 under 10 ms, 50 between 10 and 100 ms.
    const after = buckets([
      [0.01, 60],
      [0.1, 110],
      [Infinity, 110],
    ]);
    expect(quantileMs(before, after, 0.5)).toBeCloseTo(10);
    expect(quantileMs(before, after, 0.95)).toBeCloseTo(91);
    expect(quantileMs(after, after, 0.5)).toBeNull();
  });

  it('rates calls, errors and cold starts per second, and says unknown (null) where the node runs no calls', () => {
    const reading = (at: number, calls: number, errors: number, cold: number): Reading => ({
      at,
      fns: new Map([['f1', { appId: 'a1', calls, errors, coldstarts: cold, buckets: new Map(), containers: { starting: 0, busy: 1, idle: 2, paused: 0, waiting: 0 } }]]),
      memory: { used: 256, avail: 768 },
      backlog: 3,
      deadLetters: 1,
    });
    const f = figuresBetween(reading(0, 10, 1, 1), reading(2000, 30, 5, 3), true);
    expect(f).toMatchObject({ interval_s: 2, calls_per_s: 10, errors_per_s: 2, cold_share: 0.1, containers: { busy: 1, idle: 2 }, memory: { used_bytes: 256, total_bytes: 1024 } });
    expect(f.detached).toEqual({ backlog: 3, dead_letters: 1 });
    expect(figuresBetween(undefined, reading(0, 10, 1, 1), true).calls_per_s).toBeNull();
    expect(figuresBetween(reading(0, 10, 1, 1), reading(2000, 30, 5, 3), false)).toMatchObject({ calls_per_s: null, containers: null });
    expect(figuresBetween(reading(0, 10, 1, 1), reading(2000, 30, 5, 3), true, () => false).fns).toEqual([]);
  });

  it('reads a registry without calls as no fns, and memory as unknown where no agent runs', async () => {
    const metrics = new Metrics({ role: 'full', version: 'test' });
    const r = await readRegistry(metrics.registry);
    expect(r.fns.size).toBe(0);
    expect(r.memory).toBeUndefined();
  });
});

describe('the pulse', () => {
  it('runs one timer for every listener, only while one listens, and refuses listeners beyond its bound', async () => {
    let reads = 0;
    const pulse = new Pulse({
      read: async () => ({ at: Date.now(), fns: new Map(), memory: undefined, backlog: undefined, deadLetters: undefined }) satisfies Reading,
      point: (_b, a) => ({ at: a.at, calls_per_s: 0, errors_per_s: 0, p95_ms: null, busy: null, memory_used_bytes: null }),
      intervalMs: 20,
      maxListeners: 2,
    });
    const a = (): void => void reads++;
    const b = (): void => undefined;
    expect(pulse.subscribe(a)).toBe(true);
    expect(pulse.subscribe(b)).toBe(true);
    expect(pulse.subscribe(() => undefined)).toBe(false);
    await new Promise((r) => setTimeout(r, 110));
    // One reading per tick, told to both: a saw each (about 5 in 110 ms), never doubled.
    expect(reads).toBeGreaterThanOrEqual(3);
    expect(reads).toBeLessThanOrEqual(7);
    expect(pulse.history().length).toBe(reads);
    pulse.unsubscribe(a);
    expect(pulse.running).toBe(true);
    pulse.unsubscribe(b);
    expect(pulse.running).toBe(false);
    const seen = reads;
    await new Promise((r) => setTimeout(r, 60));
    expect(reads).toBe(seen);
    // A listener that throws (its stream is gone) is dropped, and the timer with it.
    pulse.subscribe(() => {
      throw new Error('gone');
    });
    await new Promise((r) => setTimeout(r, 50));
    expect(pulse.size).toBe(0);
    expect(pulse.running).toBe(false);
    pulse.close();
    expect(pulse.subscribe(a)).toBe(false);
  });

  it('keeps recording the history while nobody listens, at its slower pace, so a console opened later has the minutes before', async () => {
    let reads = 0;
    const pulse = new Pulse({
      read: async () => (reads++, { at: Date.now(), fns: new Map(), memory: undefined, backlog: undefined, deadLetters: undefined }) satisfies Reading,
      point: (b, a) => ({ at: a.at, calls_per_s: b ? 1 : null, errors_per_s: 0, p95_ms: null, busy: null, memory_used_bytes: null }),
      intervalMs: 10,
      recordMs: 40,
    });
    try {
      await new Promise((r) => setTimeout(r, 190));
      expect(pulse.running).toBe(false);
      // About 4 readings in 190 ms at 40 ms, not 19 at 10 ms; each after the first rated against the one before.
      expect(reads).toBeGreaterThanOrEqual(2);
      expect(reads).toBeLessThanOrEqual(6);
      expect(
        pulse
          .history()
          .slice(1)
          .every((p) => p.calls_per_s === 1),
      ).toBe(true);
      const recorded = reads;
      pulse.subscribe(() => undefined);
      await new Promise((r) => setTimeout(r, 100));
      expect(reads - recorded).toBeGreaterThanOrEqual(5);
    } finally {
      pulse.close();
    }
    const closed = reads;
    await new Promise((r) => setTimeout(r, 100));
    expect(reads).toBe(closed);
  });
});

describe('the console over HTTP', () => {
  let app: FastifyInstance | undefined;
  let datastore: SqlDatastore | undefined;
  afterEach(async () => {
    await app?.close();
    await datastore?.close();
  });

  const start = async (uiDir?: string) => {
    datastore = await openSqlite(':memory:');
    app = Fastify({ routerOptions: { ignoreTrailingSlash: true }, forceCloseConnections: true });
    const pulse = registerConsole(app, {
      metrics: new Metrics({ role: 'full', version: 'test' }),
      readiness: new Readiness([]),
      datastore,
      role: 'full',
      runsCalls: true,
      principal: () => undefined,
      auth: false,
      intervalMs: 50,
      ...(uiDir ? { uiDir } : {}),
    });
    await app.listen({ port: 0, host: '127.0.0.1' });
    const { port } = app.server.address() as { port: number };
    return { url: `http://127.0.0.1:${port}`, pulse };
  };

  it('answers a summary, streams figures to a listener, and lets go of it when it disconnects', async () => {
    const { url, pulse } = await start();
    const summary = (await (await fetch(`${url}/v2/console/summary`)).json()) as Record<string, unknown>;
    expect(summary).toMatchObject({ role: 'full', runs_calls: true, scope: 'node', health: { ready: true } });

    const abort = new AbortController();
    const res = await fetch(`${url}/v2/console/stream`, { signal: abort.signal });
    expect(res.headers.get('content-type')).toMatch(/^text\/event-stream/);
    const reader = res.body!.pipeThrough(new TextDecoderStream()).getReader();
    let text = '';
    while (!text.includes('event: figures')) text += (await reader.read()).value ?? '';
    expect(text).toMatch(/^event: summary\ndata: \{/);
    expect(pulse.size).toBe(1);
    abort.abort();
    await expect.poll(() => pulse.size, { timeout: 2000 }).toBe(0);
    expect(pulse.running).toBe(false);
  });

  it('serves the page revalidated, the hashed assets immutable and compressed, both under a same-origin policy', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'fnts-ui-'));
    mkdirSync(join(dir, 'assets'));
    writeFileSync(join(dir, 'index.html'), '<!doctype html><title>fnts</title>');
    writeFileSync(join(dir, 'assets', 'console.abc.js'), 'console.log(1)');
    writeFileSync(join(dir, 'assets', 'console.abc.js.gz'), 'gzipped');
    const { url } = await start(dir);
    const page = await fetch(`${url}/ui`);
    expect(page.status).toBe(200);
    expect(page.headers.get('cache-control')).toBe('no-cache');
    expect(page.headers.get('content-security-policy')).toContain("default-src 'none'; script-src 'self'");
    expect(page.headers.get('x-frame-options')).toBe('DENY');
    const again = await fetch(`${url}/ui/`, { headers: { 'if-none-match': page.headers.get('etag')! } });
    expect(again.status).toBe(304);
    const asset = await fetch(`${url}/ui/assets/console.abc.js`, { headers: { 'accept-encoding': 'identity' } });
    expect(asset.headers.get('cache-control')).toBe('public, max-age=31536000, immutable');
    expect(asset.headers.get('content-type')).toMatch(/^text\/javascript/);
    expect(await asset.text()).toBe('console.log(1)');
    expect((await fetch(`${url}/ui/assets/nope.js`)).status).toBe(404);
    expect(await (await fetch(`${url}/ui/settings.json`)).json()).toEqual({ auth: false });
    expect((await fetch(`${url}/ui/assets/..%2Findex.html`)).status).toBe(404);
  });
});

describe('the console on a node', () => {
  let app: FastifyInstance | undefined;
  let datastore: SqlDatastore | undefined;
  let registry: TokenRegistry | undefined;
  afterEach(async () => {
    await app?.close();
    registry?.close();
    await datastore?.close();
  });

  const ADMIN = 'console-test-admin-token-0123456789abcdef0123456789';

  it('an API node (no calls run here) says its call figures are unknown; a browser at / is sent to /ui, an API client is not', async () => {
    datastore = await openSqlite(':memory:');
    app = await buildServer({
      config: compileConfig({ FN_LOG_LEVEL: 'silent', FN_NODE_TYPE: 'api' }),
      logger: pino({ level: 'silent' }),
      api: { datastore },
      metrics: new Metrics({ role: 'api', version: 'test' }),
    });
    const summary = (await app.inject({ method: 'GET', url: '/v2/console/summary' })).json();
    expect(summary).toMatchObject({ role: 'api', runs_calls: false, scope: 'node', figures: { calls_per_s: null, latency_ms: null, containers: null } });
    const browser = await app.inject({ method: 'GET', url: '/', headers: { accept: 'text/html,application/xhtml+xml,*/*;q=0.8' } });
    expect(browser.statusCode).toBe(302);
    expect(browser.headers.location).toBe('/ui');
    expect((await app.inject({ method: 'GET', url: '/' })).json()).toEqual({ goto: 'https://github.com/fnproject/fn', hello: 'world!' });
    // Without FNTS_CONSOLE_FLEET it knows no other node.
    expect((await app.inject({ method: 'GET', url: '/v2/console/fleet' })).json()).toEqual({ role: 'api', scope: 'node', nodes: [] });
  });

  it('asks for a token as the API does, and shows a token limited to apps none of the node-wide figures', async () => {
    datastore = await openSqlite(':memory:');
    registry = new TokenRegistry({ store: datastore.tokens, log: pino({ level: 'silent' }), adminToken: ADMIN });
    await registry.start();
    app = await buildServer({
      // Port 1 on loopback: nothing listens there.
      config: compileConfig({ FN_LOG_LEVEL: 'silent', FNTS_CONSOLE_FLEET: 'http://127.0.0.1:1' }),
      logger: pino({ level: 'silent' }),
      api: { datastore, tokens: { store: datastore.tokens, registry } },
      metrics: new Metrics({ role: 'full', version: 'test' }),
    });
    const as = (token?: string) => (token ? { authorization: `Bearer ${token}` } : {});
    expect((await app.inject({ method: 'GET', url: '/v2/console/summary' })).statusCode).toBe(401);
    expect((await app.inject({ method: 'GET', url: '/v2/console/stream' })).statusCode).toBe(401);
    expect((await app.inject({ method: 'GET', url: '/v2/console/fleet' })).statusCode).toBe(401);
    expect((await app.inject({ method: 'GET', url: '/ui/settings.json' })).json()).toEqual({ auth: true });
    expect((await app.inject({ method: 'GET', url: '/v2/console/summary', headers: as(ADMIN) })).json()).toMatchObject({ scope: 'node', health: { ready: true } });

    const made = await app.inject({ method: 'POST', url: '/v2/tokens', headers: as(ADMIN), payload: { name: 'team', role: 'viewer', apps: ['mine'] } });
    const limited = (made.json() as { token: string }).token;
    await expect.poll(async () => (await app!.inject({ method: 'GET', url: '/v2/console/summary', headers: as(limited) })).statusCode).toBe(200);
    const mine = (await app.inject({ method: 'GET', url: '/v2/console/summary', headers: as(limited) })).json();
    expect(mine).toMatchObject({ scope: 'apps', health: null, history: null, figures: { memory: null, detached: null, fns: [] } });
    // The fleet is node-wide: the admin sees it, the limited token does not.
    expect((await app.inject({ method: 'GET', url: '/v2/console/fleet', headers: as(ADMIN) })).json()).toMatchObject({
      scope: 'node',
      nodes: [{ url: 'http://127.0.0.1:1', up: false, error: 'not reachable: connect ECONNREFUSED 127.0.0.1:1', answered_at: null, role: null }],
    });
    expect((await app.inject({ method: 'GET', url: '/v2/console/fleet', headers: as(limited) })).json()).toEqual({ role: 'full', scope: 'apps', nodes: null });
  });
});
