/**
 * The console's API, beside the REST API and under its token guard (every
 * /v2 path needs a token with the read right when auth is on):
 *
 *   GET /v2/console/summary   the node's figures now, its health, and the charts' history (JSON)
 *   GET /v2/console/stream    the same as server-sent events: `summary` first, then `figures`
 *                             every 2 s while the stream is open, and `health` every 10 s
 *   GET /v2/console/fleet     the nodes FNTS_CONSOLE_FLEET names, as their /metrics said (fleet.ts)
 *
 * A token limited to apps sees the figures of its apps' fns only: node-wide
 * figures (memory, the detached backlog, health, the history) and the fleet
 * are null for it.
 */
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import type { Principal } from '../auth/index.js';
import type { Datastore } from '../datastore/index.js';
import { ApiError, E } from '../models/index.js';
import type { Readiness, ReadinessReport } from '../telemetry/index.js';
import { figuresBetween, type Figures, type Reading } from './figures.js';
import type { Fleet, FleetNode } from './fleet.js';
import type { HistoryPoint, Pulse } from './pulse.js';

export interface ConsoleApiDeps {
  readonly pulse: Pulse;
  readonly readiness: Readiness;
  readonly datastore: Datastore;
  /** This node's role (`full`, `api`) and whether it runs calls itself. */
  readonly role: string;
  readonly runsCalls: boolean;
  /** Whether the node's call figures can be known: it runs calls and keeps metrics (FNTS_METRICS is not off). */
  readonly callsKnown: boolean;
  /** Who the request's token speaks for; undefined when auth is off. */
  readonly principal: (req: FastifyRequest) => Principal | undefined;
  /** The nodes FNTS_CONSOLE_FLEET names (none: an empty fleet). */
  readonly fleet: Fleet;
}

/** What /v2/console/summary answers and the stream's first event carries. */
export interface Summary {
  readonly role: string;
  readonly runs_calls: boolean;
  /** `node`: every figure of the node; `apps`: the token sees its apps' fns only. */
  readonly scope: 'node' | 'apps';
  readonly health: ReadinessReport | null;
  readonly figures: Figures;
  readonly history: readonly HistoryPoint[] | null;
}

/** What /v2/console/fleet answers. */
export interface FleetReport {
  /** This node's role. */
  readonly role: string;
  readonly scope: 'node' | 'apps';
  /** Each node FNTS_CONSOLE_FLEET names, in its order (empty: it names none); null for a token limited to apps. */
  readonly nodes: readonly FleetNode[] | null;
}

/** App names by id, for tokens limited to apps: looked up once per id (a deleted app's id names nothing). */
class AppNames {
  private readonly names = new Map<string, string | null>();
  constructor(private readonly datastore: Datastore) {}

  async resolve(ids: Iterable<string>): Promise<void> {
    for (const id of ids) {
      if (this.names.has(id)) continue;
      const name = await this.datastore.getAppById(id).then(
        (a) => a.name,
        () => null,
      );
      this.names.set(id, name);
    }
  }

  allows(who: Principal | undefined): (appId: string) => boolean {
    if (who?.apps === undefined) return () => true;
    const apps = who.apps;
    return (appId) => {
      const name = this.names.get(appId);
      return typeof name === 'string' && apps.includes(name);
    };
  }
}

/**
 * The node's health for the console: one check at a time for every viewer,
 * and not more often than every `maxAgeMs` (the checks are not free: the
 * functions' network check reads the firewall's rules). Never rejects.
 */
class SharedHealth {
  private last: { at: number; report: Promise<ReadinessReport> } | undefined;
  constructor(
    private readonly readiness: Readiness,
    private readonly maxAgeMs = 10_000,
  ) {}

  /** The latest report (a check runs when it is older than maxAgeMs), and when it was asked for. */
  get(now = Date.now()): { at: number; report: Promise<ReadinessReport> } {
    if (!this.last || now - this.last.at >= this.maxAgeMs) this.last = { at: now, report: this.readiness.check() };
    return this.last;
  }
}

const appIds = (r: Reading): Set<string> => new Set([...r.fns.values()].map((f) => f.appId));

export function registerConsoleApi(app: FastifyInstance, deps: ConsoleApiDeps): void {
  const { pulse } = deps;
  const names = new AppNames(deps.datastore);
  const health = new SharedHealth(deps.readiness);
  /** Streams open now: each ends when the server closes. */
  const streams = new Set<FastifyReply>();

  const figuresFor = async (who: Principal | undefined, before: Reading | undefined, after: Reading): Promise<Figures> => {
    if (who?.apps === undefined) return figuresBetween(before, after, deps.callsKnown);
    await names.resolve(appIds(after));
    const mine = figuresBetween(before, after, deps.callsKnown, names.allows(who));
    return { ...mine, memory: null, detached: null };
  };

  const summary = async (who: Principal | undefined): Promise<Summary> => {
    const { before, after } = await pulse.latest();
    const node = who?.apps === undefined;
    return {
      role: deps.role,
      runs_calls: deps.runsCalls,
      scope: node ? 'node' : 'apps',
      health: node ? await health.get().report : null,
      figures: await figuresFor(who, before, after),
      history: node ? pulse.history() : null,
    };
  };

  app.addHook('preClose', async () => {
    for (const reply of streams) reply.raw.end();
  });

  app.get('/v2/console/summary', async (req) => summary(deps.principal(req)));

  app.get('/v2/console/fleet', async (req): Promise<FleetReport> => {
    const node = deps.principal(req)?.apps === undefined;
    return { role: deps.role, scope: node ? 'node' : 'apps', nodes: node ? await deps.fleet.report() : null };
  });

  app.get('/v2/console/stream', async (req, reply) => {
    const who = deps.principal(req);
    if (pulse.size >= pulse.maxListeners) throw new ApiError(E.ServiceUnavailable, { message: `Too many console streams open (${pulse.maxListeners}); close one and try again` });
    const first = await summary(who);
    reply.hijack();
    const res = reply.raw;
    res.writeHead(200, {
      'Content-Type': 'text/event-stream; charset=utf-8',
      'Cache-Control': 'no-store',
      'X-Accel-Buffering': 'no',
    });
    const send = (event: string, data: unknown): void => void res.write(`event: ${event}\ndata: ${JSON.stringify(data)}\n\n`);
    send('summary', first);
    const node = who?.apps === undefined;
    /** When the report this stream was last sent was asked for (tokens limited to apps get none). */
    let healthSent = node ? health.get().at : 0;
    const listener = (before: Reading | undefined, after: Reading): void => {
      if (res.destroyed || res.writableEnded) throw new Error('stream closed');
      // Figures go out at every tick; a slow one is not waited for by the others (one write each, no await on the tick's path).
      void figuresFor(who, before, after).then(
        (figures) => {
          if (!res.writableEnded) send('figures', figures);
        },
        () => undefined,
      );
      // Health when a newer report is asked for (every 10 s at most, shared by every stream), for tokens that see the node.
      const latest = node ? health.get() : undefined;
      if (latest && latest.at !== healthSent) {
        healthSent = latest.at;
        void latest.report.then((report) => {
          if (!res.writableEnded) send('health', report);
        });
      }
    };
    // Gone already (while its summary was made): nothing to listen for.
    if (res.destroyed) return;
    if (!pulse.subscribe(listener)) {
      send('error', { message: 'Too many console streams open; close one and try again' });
      res.end();
      return;
    }
    streams.add(reply);
    res.on('close', () => {
      pulse.unsubscribe(listener);
      streams.delete(reply);
    });
  });
}
