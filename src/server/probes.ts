/**
 * The health endpoints, in the form Kubernetes probes expect:
 *   GET /health  liveness: 200 {"status":"ok"} whenever the process serves HTTP
 *   GET /ready   readiness: 200 {"status":"ready","checks":{...}} when every
 *                check of the role says ok, else 503 {"status":"not ready",
 *                "checks":{...}} with what failed
 * Both are routes of their own, so neither is an unknown path (Fn's 404);
 * other methods get Fn's 405, as on every other path fnts serves. The
 * checks roles pass are made here too, so that every role asks the same
 * question of the same dependency.
 */
import type { FastifyInstance } from 'fastify';
import type { SqlDatastore } from '../datastore/index.js';
import type { Driver, FunctionNetwork } from '../drivers/index.js';
import type { Queue } from '../mq/index.js';
import type { HealthCheck, Readiness } from '../telemetry/index.js';
import { resource } from './routing.js';

export function registerProbes(app: FastifyInstance, readiness: Readiness): void {
  resource(app, '/health', { GET: async () => ({ status: 'ok' }) });
  resource(app, '/ready', {
    GET: async (_req, reply) => {
      const report = await readiness.check();
      return reply.code(report.ready ? 200 : 503).send({ status: report.ready ? 'ready' : 'not ready', checks: report.checks });
    },
  });
}

/**
 * Every role needs its datastore: a trivial query answers, and its disk has
 * room (a full one fails every change; datastore/storage.ts tells when).
 */
export function datastoreCheck(datastore: Pick<SqlDatastore, 'ping' | 'disk'>): HealthCheck {
  return {
    name: 'datastore',
    check: async () => {
      await datastore.ping();
      await datastore.disk.check();
    },
  };
}

/** A queue of its own (Redis, FN_MQ_URL) must answer: detached calls are accepted into it. */
export function queueCheck(queue: Pick<Queue, 'size'>): HealthCheck {
  return {
    name: 'queue',
    check: async () => {
      await queue.size();
    },
  };
}

/** A role that runs functions needs its container engine: it answers a ping. */
export function engineCheck(driver: Pick<Driver, 'ping'>): HealthCheck {
  return { name: 'docker', check: (signal) => driver.ping(signal) };
}

/**
 * A role that runs functions fenced off from the platform (FNTS_FUNCTION_NETWORK=isolated,
 * no FN_DOCKER_NETWORKS) is not ready while the fence cannot be had: the
 * check names why (iptables unusable, fnts not on the engine's host). None
 * when the operator chose otherwise.
 */
export function networkCheck(network: Pick<FunctionNetwork, 'wanted' | 'check'>): HealthCheck[] {
  return network.wanted ? [{ name: 'network', check: (signal) => network.check(signal) }] : [];
}
