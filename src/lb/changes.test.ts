import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { pino } from 'pino';
import { afterEach, describe, expect, it } from 'vitest';
import { eventually } from '../../test/support/wait.js';
import { ApiChangeWatch } from './changes.js';
import { RemoteLookup } from './lookup.js';

const log = pino({ level: 'silent' });

/**
 * An API node on a real port, as the LB reads it: one app, one fn whose
 * config the test sets, and (unless `feed` is false: an older fnts, Fn's
 * own) GET /v2/runner/changes, whose long polls wait until the test tells
 * of a change.
 */
class ApiNode {
  config: Record<string, string> = { V: '0' };
  /** Requests for the fn, counted. */
  fnReads = 0;
  private seq = 0;
  private readonly waiting = new Set<ServerResponse>();
  private server: Server | undefined;
  url = '';

  constructor(private readonly feed: boolean) {}

  async start(port = 0): Promise<void> {
    const server = (this.server = createServer((req, res) => this.answer(req, res)));
    await new Promise<void>((resolve) => server.listen(port, '127.0.0.1', resolve));
    this.url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  }

  get port(): number {
    return Number(new URL(this.url).port);
  }

  private answer(req: IncomingMessage, res: ServerResponse): void {
    const url = new URL(req.url ?? '/', 'http://x');
    const json = (status: number, body: unknown): void => void res.writeHead(status, { 'content-type': 'application/json' }).end(JSON.stringify(body));
    if (url.pathname === '/v2/fns/f1') {
      this.fnReads++;
      return json(200, { id: 'f1', name: 'fn', app_id: 'a1', image: 'img:1', config: this.config });
    }
    if (url.pathname === '/v2/apps/a1') return json(200, { id: 'a1', name: 'app' });
    if (url.pathname === '/v2/runner/changes' && this.feed) {
      const after = url.searchParams.get('after');
      if (after !== `e:${this.seq}`) return json(200, { cursor: `e:${this.seq}`, changes: [], reset: true });
      this.waiting.add(res);
      res.on('close', () => this.waiting.delete(res));
      return;
    }
    json(404, { message: 'Not Found' });
  }

  /** The fn's config changes, and the waiting long polls hear of it. */
  change(config: Record<string, string>): void {
    this.config = config;
    this.seq++;
    for (const res of this.waiting)
      res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify({ cursor: `e:${this.seq}`, changes: [{ kind: 'fn', id: 'f1', appId: 'a1' }], reset: false }));
    this.waiting.clear();
  }

  get polls(): number {
    return this.waiting.size;
  }

  async stop(): Promise<void> {
    const server = this.server;
    this.server = undefined;
    if (!server) return;
    server.closeAllConnections();
    await new Promise<void>((resolve) => server.close(() => resolve()));
  }
}

describe("the LB's watch on its API node's changes", () => {
  const stops: Array<() => Promise<void>> = [];
  afterEach(async () => {
    for (const stop of stops.splice(0).reverse()) await stop();
  });

  async function lbOf(api: ApiNode, ttlMs: number): Promise<{ lookup: RemoteLookup; live: () => boolean }> {
    const lookup = new RemoteLookup({ apiUrl: api.url, ttlMs, token: undefined });
    let live = false;
    const watch = new ApiChangeWatch({
      apiUrl: api.url,
      token: undefined,
      log,
      onChange: () => lookup.clear(),
      onLive: (l) => {
        live = l;
        lookup.pushed(l);
      },
    });
    watch.start();
    stops.push(() => watch.close());
    return { lookup, live: () => live };
  }

  async function apiNode(feed: boolean): Promise<ApiNode> {
    const api = new ApiNode(feed);
    await api.start();
    stops.push(() => api.stop());
    return api;
  }

  const configOf = async (lookup: RemoteLookup): Promise<string | undefined> => (await lookup.byFn('f1')).fn.config['V'];

  it('drops a cached fn as soon as the API node tells of its change, with a cache time of 30 s', async () => {
    const api = await apiNode(true);
    const { lookup, live } = await lbOf(api, 30_000);
    expect(await eventually(() => live() && api.polls === 1, 2000, 5)).toBe(true);
    expect(await configOf(lookup)).toBe('0');
    api.change({ V: '1' });
    const at = performance.now();
    expect(await eventually(async () => (await configOf(lookup)) === '1', 1000, 5)).toBe(true);
    expect(performance.now() - at).toBeLessThan(500);
    // Between changes the cache answers: the API node is not asked again.
    const reads = api.fnReads;
    for (let i = 0; i < 5; i++) expect(await configOf(lookup)).toBe('1');
    expect(api.fnReads).toBe(reads);
  });

  it('keeps FNTS_LB_CACHE_MSECS with an API node that has no change feed (an older fnts, Fn)', async () => {
    const api = await apiNode(false);
    const { lookup, live } = await lbOf(api, 300);
    expect(await configOf(lookup)).toBe('0');
    api.change({ V: '1' });
    // Within the cache time the old answer serves; after it, the new one.
    expect(await configOf(lookup)).toBe('0');
    expect(await eventually(async () => (await configOf(lookup)) === '1', 2000, 20)).toBe(true);
    expect(live()).toBe(false);
  });

  it('serves its cached fns while the API node is away, and learns of what changed once it is back', async () => {
    const api = await apiNode(true);
    const { lookup, live } = await lbOf(api, 50);
    expect(await eventually(() => live() && api.polls === 1, 2000, 5)).toBe(true);
    expect(await configOf(lookup)).toBe('0');
    const port = api.port;
    await api.stop();
    expect(await eventually(() => !live(), 2000, 5)).toBe(true);
    await new Promise((r) => setTimeout(r, 100));
    // Past FNTS_LB_CACHE_MSECS, within the stale bound: the last answer still serves.
    expect(await configOf(lookup)).toBe('0');
    api.config = { V: '2' };
    await api.start(port);
    expect(await eventually(async () => live() && (await configOf(lookup)) === '2', 5000, 20)).toBe(true);
  });
});
