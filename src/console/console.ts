/**
 * The console (docs/operations.md#the-console): its page at /ui and its API
 * under /v2/console, on every node that serves the REST API. It reads the
 * node's own metrics registry, so what it shows is what /metrics says.
 */
import type { FastifyInstance, FastifyRequest } from 'fastify';
import type { Principal } from '../auth/index.js';
import type { Datastore } from '../datastore/index.js';
import type { Metrics, Readiness } from '../telemetry/index.js';
import { registerUi, UI_DIR } from './assets.js';
import { figuresBetween, readRegistry, type Reading } from './figures.js';
import { Fleet } from './fleet.js';
import { Pulse, type HistoryPoint } from './pulse.js';
import { registerConsoleApi } from './routes.js';

export interface ConsoleDeps {
  /** The node's metrics; absent (FNTS_METRICS=off): every figure is unknown. */
  readonly metrics: Metrics | undefined;
  readonly readiness: Readiness;
  readonly datastore: Datastore;
  readonly role: string;
  /** Whether this node runs calls (a full node) or only serves the API (an API node). */
  readonly runsCalls: boolean;
  readonly principal: (req: FastifyRequest) => Principal | undefined;
  /** Whether /v2 asks for a token (FNTS_AUTH=on): the page shows the login first. */
  readonly auth: boolean;
  /** Where the built page and assets are (default dist/ui/). */
  readonly uiDir?: string;
  /** The base URLs of the fleet's other nodes (FNTS_CONSOLE_FLEET), whose /metrics the Fleet view shows. */
  readonly fleet?: readonly string[];
  /** How often the live figures are read while a stream is open (default 2000 ms). */
  readonly intervalMs?: number;
  readonly onError?: (err: unknown) => void;
}

const nothing = (): Reading => ({ at: Date.now(), fns: new Map(), memory: undefined, backlog: undefined, deadLetters: undefined });

/** Registers the console's routes on `app`; answers the pulse its streams share (for tests: how many listen). */
export function registerConsole(app: FastifyInstance, deps: ConsoleDeps): Pulse {
  registerUi(app, { auth: deps.auth }, deps.uiDir ?? UI_DIR);
  const registry = deps.metrics?.registry;
  const callsKnown = deps.runsCalls && registry !== undefined;
  const point = (before: Reading | undefined, after: Reading): HistoryPoint => {
    const f = figuresBetween(before, after, callsKnown);
    return {
      at: after.at,
      calls_per_s: f.calls_per_s,
      errors_per_s: f.errors_per_s,
      p95_ms: f.latency_ms?.p95 ?? null,
      busy: f.containers?.busy ?? null,
      memory_used_bytes: f.memory?.used_bytes ?? null,
    };
  };
  const pulse = new Pulse({
    read: registry ? () => readRegistry(registry) : async () => nothing(),
    point,
    ...(deps.intervalMs !== undefined ? { intervalMs: deps.intervalMs } : {}),
    ...(deps.onError ? { onError: deps.onError } : {}),
  });
  const fleet = new Fleet({ urls: deps.fleet ?? [] });
  app.addHook('onClose', async () => {
    pulse.close();
    fleet.close();
  });
  registerConsoleApi(app, { pulse, fleet, readiness: deps.readiness, datastore: deps.datastore, role: deps.role, runsCalls: deps.runsCalls, callsKnown, principal: deps.principal });
  return pulse;
}
