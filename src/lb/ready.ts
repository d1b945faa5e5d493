/**
 * What an LB needs to be ready (GET /ready): a runner it can reach.
 */
import type { HealthCheck } from '../telemetry/index.js';
import type { RunnerPool } from './pool.js';

/**
 * An LB is ready while it can reach a runner: not ready when it knows
 * runners and every connection to them failed (each channel dials at
 * start and redials in the background, so this holds before any call).
 * A managed pool that lists no runner yet is ready: the pool manager
 * starts runners for the calls the LB advertises.
 */
export function runnersCheck(pool: Pick<RunnerPool, 'everyRunner'>): HealthCheck {
  return {
    name: 'runners',
    check: async () => {
      const runners = pool.everyRunner();
      if (runners.length > 0 && !runners.some((r) => r.client.reachable)) {
        throw new Error(`no runner is reachable: ${runners.map((r) => r.address).join(', ')}`);
      }
    },
  };
}
