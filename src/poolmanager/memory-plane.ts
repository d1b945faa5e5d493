/**
 * A control plane in memory, for the manager's logic tests and as the
 * contract suite's reference: runners are records, started at once, with
 * addresses handed out in order.
 */
import { checkGroup, type ControlPlane, type RunnerInfo } from './control-plane.js';

export class MemoryPlane implements ControlPlane {
  readonly kind = 'memory';
  private readonly byGroup = new Map<string, RunnerInfo[]>();
  private next = 0;
  /** Every runner removed, as group/id. */
  readonly removed: string[] = [];

  constructor(private readonly clock: () => number = Date.now) {}

  async runners(group: string): Promise<RunnerInfo[]> {
    checkGroup(group);
    return [...(this.byGroup.get(group) ?? [])];
  }

  async provision(group: string, n: number): Promise<number> {
    checkGroup(group);
    const list = this.byGroup.get(group) ?? [];
    for (let i = 0; i < n; i++) {
      const k = this.next++;
      list.push({ id: `${group}-${k}`, address: `10.0.0.${k}:9190`, createdAt: this.clock() });
    }
    this.byGroup.set(group, list);
    return n;
  }

  async remove(group: string, id: string): Promise<void> {
    checkGroup(group);
    const list = this.byGroup.get(group) ?? [];
    const at = list.findIndex((r) => r.id === id);
    if (at < 0) return;
    list.splice(at, 1);
    this.removed.push(`${group}/${id}`);
  }

  async close(): Promise<void> {}
}
