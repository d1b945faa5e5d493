/**
 * What a role builds, and how it is released: each composition root
 * (full.ts, api.ts, lb.ts, pure-runner.ts, poolmanager.ts) returns the parts
 * it made and nothing else, and start.ts serves HTTP in front of them and
 * releases them in order when the process stops.
 */
import type { Logger } from 'pino';
import type { Agent, AsyncWorkers } from '../agent/index.js';
import type { TokenRegistry } from '../auth/index.js';
import type { Invoker } from '../call/index.js';
import type { Config } from '../config/index.js';
import type { ChangeLink, SqlDatastore, SqlSecretStore, TokenStore } from '../datastore/index.js';
import type { Changes } from '../models/index.js';
import type { Queue } from '../mq/index.js';
import type { RunnerServer } from '../runner/index.js';
import type { CallRecorder, InvokeHandler, QueueReconciler, SyslogForwarder } from '../server/index.js';
import type { HealthCheck, Metrics, Tracing } from '../telemetry/index.js';

/** What a role is given: its settings, its logger, and what it reports to. */
export interface RoleContext {
  readonly config: Config;
  readonly logger: Logger;
  /** Unless FNTS_METRICS=off. */
  readonly metrics: Metrics | undefined;
  /** When an OTLP endpoint is set. */
  readonly tracing: Tracing | undefined;
}

/** What a role runs. Everything is optional: a role has only what it uses. */
export interface RoleParts {
  /** The database: apps, fns, triggers, call records (full and api nodes only). */
  readonly datastore?: SqlDatastore;
  /** Apps' and fns' secrets, in `datastore` (full and api nodes): the secrets API, and the files of a full node's containers. */
  readonly secrets?: SqlSecretStore;
  /** Where the API tells its changes (the lookup cache and the agent listen). */
  readonly changes?: Changes;
  /** Carries `changes` to and from the other nodes on the database (datastore/sql/change-feed.ts); closed before it. */
  readonly changeLink?: ChangeLink;
  /** The queue of detached calls, when the role keeps or shares one. */
  readonly queue?: Queue;
  /** API tokens (FNTS_AUTH=on, nodes with a database): the REST API needs one. */
  readonly tokens?: { readonly store: TokenStore; readonly registry: TokenRegistry };
  /** Serve the REST API (apps, fns, triggers, calls) from `datastore`. */
  readonly api?: boolean;
  readonly invoke?: InvokeHandler;
  /** Cuts calls in flight (abort) and releases everything (close). */
  readonly invoker?: Invoker;
  readonly agent?: Agent;
  /** Keeps call records and logs; closed after the invoker, so the last calls are stored. */
  readonly recorder?: CallRecorder;
  /** Sends function logs to apps' syslog_url; closed after the invoker. */
  readonly syslog?: SyslogForwarder;
  /** Run detached calls from the queue; stop leasing first, their calls end with the invoker's. */
  readonly workers?: AsyncWorkers;
  /** Keeps the records of detached calls true to their queue; stopped before the queue closes. */
  readonly reconciler?: QueueReconciler;
  /** What the role needs to be ready (GET /ready). */
  readonly checks?: readonly HealthCheck[];
  /** A pure runner's gRPC server: drained (calls in flight finish, new ones refused) before the agent closes. */
  readonly runner?: RunnerServer;
  /** The gRPC port it listens on (pure runner, pool manager). */
  readonly grpcPort?: number;
  /** Stops what the role runs besides the above (the pool manager's loop and server); first in line at close. */
  readonly stop?: () => Promise<void>;
  /**
   * Told once the server listens: work the role starts in the background
   * that must not lengthen its start (the functions' network: its iptables
   * programs each hold the event loop while they are forked). Must not
   * throw or block.
   */
  readonly listening?: () => void;
}

/** A role's parts as it makes them: what is there when it fails is released (start.ts). */
export type Building = { -readonly [K in keyof RoleParts]?: RoleParts[K] };

/** A role's composition root: makes its parts into `made`, as it goes. */
export type Role = (ctx: RoleContext, made: Building) => Promise<void>;

/**
 * Releases what a role holds, in order: no new detached calls are leased
 * while the calls in flight finish, then the last records are stored, the
 * log destinations and the queue closed, and the datastore last.
 */
export async function release(parts: RoleParts, tracing: Tracing | undefined): Promise<void> {
  await parts.stop?.();
  // A runner refuses new calls while those in flight finish; then its port closes.
  await parts.runner?.drain();
  await parts.runner?.close();
  await Promise.all([parts.workers?.close(), parts.invoker?.close(), parts.reconciler?.close()]);
  await Promise.all([parts.recorder?.close(), tracing?.shutdown()]);
  parts.syslog?.close();
  await parts.queue?.close();
  parts.tokens?.registry.close();
  await parts.changeLink?.close();
  await parts.datastore?.close();
}
