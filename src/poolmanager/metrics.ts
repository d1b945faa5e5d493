/**
 * The pool manager's series, on the role's /metrics registry:
 *
 *   fnts_pool_runners{group,state}     runners by state (starting, active, draining, removing)
 *   fnts_pool_target_runners{group}    the predictor's target, within the group's bounds
 *   fnts_pool_demand_mb{group}         the memory the LBs' calls need, summed
 *   fnts_pool_provisioned_total{group} runners asked of the control plane
 *   fnts_pool_removed_total{group}     runners removed through it
 *   fnts_pool_lbs                      LBs advertising
 *
 * Gauges are read from the manager when Prometheus scrapes.
 */
import { Counter, Gauge, type Registry } from 'prom-client';
import type { CapacityBook } from './capacity.js';
import { RUNNER_STATES, type PoolEvents, type PoolManager } from './manager.js';

export class PoolMetrics implements PoolEvents {
  private readonly provisioned: Counter<'group'>;
  private readonly removed: Counter<'group'>;
  /** The manager whose runners the gauges show (set by watch: the manager takes these metrics as its events, so it comes after them). */
  private manager: Pick<PoolManager, 'view'> | undefined;

  constructor(registry: Registry, book: CapacityBook) {
    const registers = [registry];
    const view = (): ReturnType<PoolManager['view']> => this.manager?.view() ?? [];
    this.provisioned = new Counter({ name: 'fnts_pool_provisioned_total', help: 'Runners the pool manager asked the control plane for', labelNames: ['group'], registers });
    this.removed = new Counter({ name: 'fnts_pool_removed_total', help: 'Runners the pool manager removed through the control plane', labelNames: ['group'], registers });
    new Gauge({
      name: 'fnts_pool_runners',
      help: 'Runners of each group, by state (starting, active: in the membership, draining, removing)',
      labelNames: ['group', 'state'],
      registers,
      collect() {
        this.reset();
        for (const g of view()) {
          for (const state of RUNNER_STATES) this.set({ group: g.group, state }, g.runners.filter((r) => r.state === state).length);
        }
      },
    });
    new Gauge({
      name: 'fnts_pool_target_runners',
      help: 'The runners the predictor aims for, per group',
      labelNames: ['group'],
      registers,
      collect() {
        for (const g of view()) this.set({ group: g.group }, g.target);
      },
    });
    new Gauge({
      name: 'fnts_pool_demand_mb',
      help: 'The memory (MB) the LBs said their calls need, per group',
      labelNames: ['group'],
      registers,
      collect() {
        for (const g of view()) this.set({ group: g.group }, g.demandMb);
      },
    });
    new Gauge({
      name: 'fnts_pool_lbs',
      help: 'LBs advertising capacity to the pool manager',
      registers,
      collect() {
        this.set(book.lbs().length);
      },
    });
  }

  /** Shows `manager`'s runners, targets and demand in the gauges. */
  watch(manager: Pick<PoolManager, 'view'>): void {
    this.manager = manager;
  }

  onProvisioned(group: string, n: number): void {
    this.provisioned.inc({ group }, n);
  }

  onRemoved(group: string): void {
    this.removed.inc({ group });
  }
}
