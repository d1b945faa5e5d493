/**
 * What the LBs need, per runner group: each LB's latest AdvertiseCapacity,
 * group by group, kept for `ttlMs`. A requirement not repeated within that
 * time expires; an LB whose requirements have all expired (it stopped
 * advertising: it crashed, or was scaled away) is purged and reported.
 *
 * A group's demand is the sum of its unexpired requirements, one per LB.
 * An LB restates every group it knows in each advertisement (0 for a group
 * with nothing in flight); a group it leaves out keeps its last value until
 * the TTL, as in Fn's manager.
 */
import { tellEach } from '../models/index.js';

/** One LB's requirement for one group. */
interface Requirement {
  memMb: number;
  /** When it was last stated (ms, the book's clock). */
  at: number;
}

export interface CapacityBookOptions {
  /** How long a requirement holds without being restated. */
  readonly ttlMs: number;
  /** Told of each LB purged for silence; must not throw (a throw is ignored). */
  readonly onPurge?: (lbId: string) => void;
}

export class CapacityBook {
  /** lbId -> group -> requirement. */
  private readonly byLb = new Map<string, Map<string, Requirement>>();
  private readonly known = new Set<string>();

  constructor(private readonly o: CapacityBookOptions) {}

  /** Records what `lbId` needs now (MB per group), stated at `now`. */
  advertise(lbId: string, needs: Iterable<readonly [group: string, memMb: number]>, now: number): void {
    let mine = this.byLb.get(lbId);
    if (!mine) this.byLb.set(lbId, (mine = new Map()));
    for (const [group, memMb] of needs) {
      this.known.add(group);
      mine.set(group, { memMb: Math.max(0, memMb), at: now });
    }
  }

  /** Makes `group` known (an LB asked for its membership) without a requirement. */
  touch(group: string): void {
    this.known.add(group);
  }

  /** Drops requirements older than the TTL, and the LBs left with none; returns the LBs purged. */
  purge(now: number): string[] {
    const purged: string[] = [];
    for (const [lbId, mine] of this.byLb) {
      for (const [group, r] of mine) if (now - r.at > this.o.ttlMs) mine.delete(group);
      if (mine.size > 0) continue;
      this.byLb.delete(lbId);
      purged.push(lbId);
      // A listener's fault is not the book's (the book has no log: it is skipped).
      tellEach([this.o.onPurge], (onPurge) => onPurge(lbId), undefined, 'a purge listener');
    }
    return purged;
  }

  /** The memory (MB) `group`'s calls need across the LBs: the sum of the unexpired requirements. */
  demand(group: string, now: number): number {
    let total = 0;
    for (const mine of this.byLb.values()) {
      const r = mine.get(group);
      if (r && now - r.at <= this.o.ttlMs) total += r.memMb;
    }
    return total;
  }

  /** Every group an LB has named, in the order first named. */
  groups(): string[] {
    return [...this.known];
  }

  /** The LBs advertising now. */
  lbs(): string[] {
    return [...this.byLb.keys()];
  }
}
