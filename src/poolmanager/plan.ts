/**
 * One scaling decision, as a pure function so that the manager and the
 * trace simulation (predictors.test.ts) decide alike: given a group's
 * runners and its target, how many draining runners to take back, how many
 * to ask the control plane for, and how many active ones to drain.
 *
 * Scale up takes back draining runners first (they are warm and already
 * paid for), then provisions, at most `maxProvision` per decision. Scale
 * down drains; runners still coming are not cancelled (no plane can), the
 * next decisions drain them once they arrive if they are not needed.
 */
export interface PlanInput {
  /** Runners taking calls. */
  readonly active: number;
  /** Runners asked for or starting, not yet taking calls. */
  readonly coming: number;
  /** Runners draining that can still be taken back. */
  readonly draining: number;
  /** Runners wanted (already clamped to the group's bounds). */
  readonly target: number;
  /** The most runners one decision may ask for. */
  readonly maxProvision: number;
}

export interface Plan {
  readonly reactivate: number;
  readonly provision: number;
  readonly drain: number;
}

export function plan({ active, coming, draining, target, maxProvision }: PlanInput): Plan {
  const short = target - active - coming;
  if (short > 0) {
    const reactivate = Math.min(draining, short);
    return { reactivate, provision: Math.max(0, Math.min(maxProvision, short - reactivate)), drain: 0 };
  }
  return { reactivate: 0, provision: 0, drain: Math.max(0, active - Math.max(0, target)) };
}
