/**
 * The pool manager's scaling loop: every tick, for each runner group an LB
 * has named, it reads the group's runners from the control plane, asks the
 * new ones and the draining ones how many calls they have in flight
 * (RunnerProtocol.Status), samples the LBs' demand, lets the predictor set a
 * target, and acts on `plan`'s decision.
 *
 * A runner's life, as the manager sees it:
 *
 *   plane lists it ──> starting ──Status answers──> active ──target below──> draining
 *                                                     ^                        │  │
 *                                                     └──target above (newest │  │ 0 calls in flight and
 *                                                        drained first) ──────┘  │ the drain grace passed
 *                                                                                v
 *                                   gone <──plane removed it (SIGTERM: it refuses
 *                                           new calls, finishes any) ── removing
 *
 * Only active runners are members (GetLBGroup), oldest first by the time the
 * plane created them, so the LBs' consistent hashing keeps its order as
 * runners come and go, and across restarts of the manager. A draining
 * runner leaves the membership at once; the grace lets every LB fetch the
 * membership again before the runner is removed, and the runner's own
 * SIGTERM drain covers a call placed on it even later (refused, so the LB
 * places it elsewhere). Scale down picks the newest runner: the oldest keep
 * their place in the hash ring and their hot containers.
 */
import type { Logger } from 'pino';
import { tellEach } from '../models/index.js';
import type { CapacityBook } from './capacity.js';
import { ControlPlaneError, type ControlPlane, type RunnerInfo } from './control-plane.js';
import { plan } from './plan.js';
import type { DemandSample, Predictor } from './predictors.js';
import type { StatusProbe } from './status.js';

export type RunnerState = 'starting' | 'active' | 'draining' | 'removing';
export const RUNNER_STATES: readonly RunnerState[] = ['starting', 'active', 'draining', 'removing'];

export interface ManagedRunner {
  readonly id: string;
  address: string | undefined;
  readonly createdAt: number;
  state: RunnerState;
  /** When it entered its state (ms). */
  since: number;
  /** Calls in flight at the last Status; undefined when it did not answer. */
  inFlight: number | undefined;
  /** When it last answered Status (ms); undefined if never. */
  answeredAt: number | undefined;
}

/** What the manager reports as it acts; listeners must not throw (one that does is logged and skipped) and must not block. */
export interface PoolEvents {
  onProvisioned?(group: string, n: number): void;
  onRemoved?(group: string, id: string): void;
}

export interface PoolManagerOptions {
  readonly plane: ControlPlane;
  readonly book: CapacityBook;
  readonly predictor: Predictor;
  /** Calls in flight on a runner (StatusProbe): readiness of new runners, the end of a drain. */
  readonly probe: StatusProbe;
  readonly log: Logger;
  /** The memory (MB) one runner offers to calls. */
  readonly runnerMemMb: number;
  /** Runners per group, at least and at most. */
  readonly minRunners: number;
  readonly maxRunners: number;
  /** The most runners one tick asks the plane for, per group. */
  readonly maxProvisionPerTick: number;
  /** How often the loop runs (ms). */
  readonly tickMs: number;
  /** How long a runner takes from being asked for to taking calls (ms): how far the predictor looks ahead. */
  readonly leadMs: number;
  /** How long a draining runner stays out of the membership before it may be removed (ms): the LBs' refresh. */
  readonly drainGraceMs: number;
  /** A draining runner is removed after this long even with calls in flight, or silent (ms). */
  readonly maxDrainMs: number;
  /** A runner that has not answered Status this long after it was listed is removed (ms). */
  readonly startTimeoutMs: number;
  readonly events?: PoolEvents;
  /** ms since the epoch; injectable for tests. */
  readonly clock?: () => number;
}

/** A group as the manager sees it: for metrics and logs. */
export interface GroupView {
  readonly group: string;
  readonly target: number;
  readonly demandMb: number;
  readonly runners: ReadonlyArray<Readonly<ManagedRunner>>;
}

/** Samples kept per group: more than any predictor reads. */
const HISTORY = 120;

class RunnerGroup {
  readonly runners = new Map<string, ManagedRunner>();
  readonly history: DemandSample[] = [];
  target = 0;
  /** Runners asked for that the plane does not list yet, each with when it was asked for. */
  asked: number[] = [];
  /** What made the group's last tick fail (undefined: it went well), so that a failure is told once, not every tick. */
  failing: string | undefined;

  constructor(readonly name: string) {}

  inState(state: RunnerState): ManagedRunner[] {
    return [...this.runners.values()].filter((r) => r.state === state);
  }
}

/** Oldest first: the plane's creation time, then its id. */
function byAge(a: ManagedRunner, b: ManagedRunner): number {
  return a.createdAt - b.createdAt || (a.id < b.id ? -1 : a.id > b.id ? 1 : 0);
}

export class PoolManager {
  private readonly groups = new Map<string, RunnerGroup>();
  private readonly clock: () => number;
  /** Removals under way: close() waits for them. */
  private readonly removals = new Set<Promise<void>>();
  private timer: NodeJS.Timeout | undefined;
  private running: Promise<void> | undefined;
  private closed = false;

  constructor(private readonly o: PoolManagerOptions) {
    this.clock = o.clock ?? Date.now;
  }

  /** Runs a tick every `tickMs` until close(). */
  start(): void {
    const loop = (): void => {
      this.running = this.tick().finally(() => {
        this.running = undefined;
        if (!this.closed) this.timer = setTimeout(loop, this.o.tickMs);
      });
    };
    this.timer = setTimeout(loop, 0);
  }

  /** The group's active runners (host:port), oldest first; makes the group known. */
  membership(group: string): string[] {
    this.o.book.touch(group);
    const g = this.groups.get(group);
    if (!g) return [];
    return g
      .inState('active')
      .sort(byAge)
      .flatMap((r) => (r.address ? [r.address] : []));
  }

  view(): GroupView[] {
    const now = this.clock();
    return [...this.groups.values()].map((g) => ({ group: g.name, target: g.target, demandMb: this.o.book.demand(g.name, now), runners: [...g.runners.values()] }));
  }

  /** One pass over every group; never rejects (a group's failure is logged, the others go on). */
  async tick(): Promise<void> {
    const now = this.clock();
    for (const lb of this.o.book.purge(now)) this.o.log.warn({ lb }, 'an LB stopped advertising: its capacity requirements are dropped');
    for (const name of this.o.book.groups()) if (!this.groups.has(name)) this.groups.set(name, new RunnerGroup(name));
    await Promise.all(
      [...this.groups.values()].map((g) =>
        this.tickGroup(g, now).then(
          () => this.recovered(g),
          (err: unknown) => this.failed(g, err),
        ),
      ),
    );
  }

  /**
   * A group's tick failed. Ticks come every second and a failure (an image
   * to build, an engine down) lasts until someone acts, so it is logged
   * when it begins or changes, in words that say what to do, not every
   * tick; the plane's own errors carry no stack (they are not bugs).
   */
  private failed(g: RunnerGroup, err: unknown): void {
    const known = err instanceof ControlPlaneError;
    const what = known ? `${err.code}: ${err.message}` : String(err);
    if (what === g.failing) return;
    g.failing = what;
    const message = `scaling runner group ${g.name} fails: ${err instanceof Error ? err.message : String(err)}; trying again every tick (logged again when this changes)`;
    if (known) this.o.log.error({ group: g.name, code: err.code }, message);
    else this.o.log.error({ err, group: g.name }, message);
  }

  private recovered(g: RunnerGroup): void {
    if (g.failing === undefined) return;
    g.failing = undefined;
    this.o.log.info({ group: g.name }, `scaling runner group ${g.name} works again`);
  }

  private async tickGroup(g: RunnerGroup, now: number): Promise<void> {
    this.reconcile(g, await this.o.plane.runners(g.name), now);
    await this.probe(g, now);

    g.history.push({ at: now, memMb: this.o.book.demand(g.name, now) });
    if (g.history.length > HISTORY) g.history.splice(0, g.history.length - HISTORY);
    const wanted = this.o.predictor(g.history, { runnerMemMb: this.o.runnerMemMb, leadMs: this.o.leadMs });
    g.target = Math.min(this.o.maxRunners, Math.max(this.o.minRunners, wanted));

    const active = g.inState('active').sort(byAge);
    const draining = g.inState('draining').sort((a, b) => b.since - a.since);
    const coming = g.inState('starting').length + g.asked.length;
    const p = plan({ active: active.length, coming, draining: draining.length, target: g.target, maxProvision: this.o.maxProvisionPerTick });
    for (const r of draining.slice(0, p.reactivate)) {
      this.enter(r, 'active', now);
      this.o.log.info({ group: g.name, runner: r.id, address: r.address }, 'runner taken back from draining: demand rose');
    }
    for (const r of active.slice(active.length - p.drain)) {
      this.enter(r, 'draining', now);
      this.o.log.info({ group: g.name, runner: r.id, address: r.address, target: g.target }, 'runner draining: it left the membership, it is removed once its calls are done');
    }
    if (p.provision > 0) {
      const n = await this.o.plane.provision(g.name, p.provision);
      for (let i = 0; i < n; i++) g.asked.push(now);
      this.o.log.info({ group: g.name, asked: n, target: g.target, demandMb: g.history.at(-1)?.memMb }, `asked the ${this.o.plane.kind} plane for ${n} runner(s)`);
      if (n > 0) tellEach([this.o.events], (e) => e.onProvisioned?.(g.name, n), this.o.log, 'a pool event listener');
    }
    this.removeDone(g, now);
  }

  /** Takes in the plane's list: new runners start, vanished ones are forgotten. */
  private reconcile(g: RunnerGroup, listed: readonly RunnerInfo[], now: number): void {
    const seen = new Set<string>();
    for (const info of listed) {
      seen.add(info.id);
      const known = g.runners.get(info.id);
      if (known) {
        known.address = info.address ?? known.address;
        continue;
      }
      g.runners.set(info.id, { id: info.id, address: info.address, createdAt: info.createdAt, state: 'starting', since: now, inFlight: undefined, answeredAt: undefined });
      // A runner the plane lists stands for the oldest ask (or one from before a restart).
      g.asked.shift();
    }
    for (const [id, r] of g.runners) {
      if (seen.has(id)) continue;
      g.runners.delete(id);
      if (r.state !== 'removing') this.o.log.warn({ group: g.name, runner: id, state: r.state }, 'a runner went away without the manager removing it');
    }
    // Asks the plane never answered (it could not place them) are given up after the start timeout.
    g.asked = g.asked.filter((at) => now - at <= this.o.startTimeoutMs);
  }

  /** Status of the runners the manager waits on: starting ones (are they up?) and draining ones (are they done?). */
  private async probe(g: RunnerGroup, now: number): Promise<void> {
    const waiting = [...g.runners.values()].filter((r) => r.address !== undefined && (r.state === 'starting' || r.state === 'draining'));
    await Promise.all(
      waiting.map(async (r) => {
        try {
          r.inFlight = await this.o.probe(r.address!);
          r.answeredAt = now;
          if (r.state === 'starting') {
            this.enter(r, 'active', now);
            this.o.log.info({ group: g.name, runner: r.id, address: r.address }, 'runner up: it joined the membership');
          }
        } catch {
          r.inFlight = undefined;
        }
      }),
    );
  }

  private enter(r: ManagedRunner, state: RunnerState, now: number): void {
    r.state = state;
    r.since = now;
  }

  /** Removes the draining runners that are done, and the starting ones that never came up. */
  private removeDone(g: RunnerGroup, now: number): void {
    for (const r of g.runners.values()) {
      const age = now - r.since;
      let why: string | undefined;
      if (r.state === 'draining' && age >= this.o.drainGraceMs && r.inFlight === 0) why = 'drained';
      else if (r.state === 'draining' && age >= this.o.maxDrainMs) why = r.inFlight === undefined ? 'silent while draining' : `still ${r.inFlight} call(s) in flight after the longest drain`;
      else if (r.state === 'starting' && age >= this.o.startTimeoutMs) why = 'never answered Status';
      if (why === undefined) continue;
      this.enter(r, 'removing', now);
      this.o.log.info({ group: g.name, runner: r.id, address: r.address, why }, 'removing runner');
      const removal = this.o.plane.remove(g.name, r.id).then(
        () => tellEach([this.o.events], (e) => e.onRemoved?.(g.name, r.id), this.o.log, 'a pool event listener'),
        (err: unknown) => {
          // Back to draining: the next ticks try again.
          if (g.runners.get(r.id) === r) this.enter(r, 'draining', this.clock() - this.o.drainGraceMs);
          this.o.log.error({ err, group: g.name, runner: r.id }, 'the control plane could not remove a runner; trying again next tick');
        },
      );
      this.removals.add(removal);
      void removal.finally(() => this.removals.delete(removal));
    }
  }

  /** Stops the loop and waits for the removals under way; the runners stay (a restarted manager takes them back). Idempotent. */
  async close(): Promise<void> {
    this.closed = true;
    clearTimeout(this.timer);
    await this.running;
    await Promise.all([...this.removals]);
  }
}
