/**
 * Runner pools: which runners an LB may place a fn's calls on.
 *
 * The LB asks its pool for the runners of a call's group (the app's
 * fnts.io/runner-group) at each round of placement, and tells it how much
 * memory each call needs while the call waits and runs. Two pools:
 *
 * - `StaticPool`: FN_RUNNER_ADDRESSES, one list for every group (Fn's LB);
 * - `ManagedPool`: FN_NPM_ADDRESS, each group's runners as a pool manager
 *   lists them (Fn's 2018 protocol), polled; the groups' needs advertised.
 *
 * A runner's life in a managed pool:
 *
 *   listed by the manager --> member (calls placed on it)
 *        ^                      | no longer listed
 *        | listed again         v
 *        +-------------- draining (no new calls; its calls in flight finish)
 *                               | its last call ended
 *                               v
 *                            closed (its channel too; listed again: a new client)
 */
import type { Logger } from 'pino';
import type { RunnerClient } from '../rpc/index.js';
import type { RunnerView } from './placer.js';
import type { CapacitySnapshot, PoolManagerApi } from './npm-client.js';

const MAX_DOWN_MS = 5_000;

/** What a pool and the LB use of a runner's client (RunnerClient; a small double in unit tests). */
export type RunnerConnection = Pick<RunnerClient, 'address' | 'reachable' | 'engage' | 'close'> & Partial<Pick<RunnerClient, 'draining' | 'secure'>>;

/** A runner as the LB tracks it: the placer's view, plus its client, failure backoff and drain. */
export class Runner implements RunnerView {
  inFlight = 0;
  private failures = 0;
  private downUntil = 0;
  private leaving = false;
  private shut = false;

  constructor(readonly client: RunnerConnection) {}

  get address(): string {
    return this.client.address;
  }

  /**
   * Not leaving, not held down, not draining (the runner said so), and its channel reachable (no failed
   * connection since the runner last answered). Counting calls on an
   * unreachable channel as failures would double the hold-down while the
   * channel's own redial runs, and a restarted runner would wait for both.
   * The channel needs no calls to recover: it redials in the background
   * (lb/channel.ts) and is reachable again once the runner accepts a
   * connection.
   */
  get up(): boolean {
    return !this.leaving && this.downUntil <= performance.now() && this.client.reachable && this.client.draining !== true;
  }

  /** Out of its pool: no new call may be placed on it (checked just before each attempt). */
  get draining(): boolean {
    return this.leaving;
  }

  /** Its client is closed: it is gone from the pool for good. */
  get closed(): boolean {
    return this.shut;
  }

  /** An attempt could not reach it: held down for a while. True when it was reached until now (a change to tell). */
  failed(): boolean {
    this.failures++;
    this.downUntil = performance.now() + Math.min(MAX_DOWN_MS, 100 * 2 ** (this.failures - 1));
    return this.failures === 1;
  }

  /** It answered: up again. Answers the failed attempts since it last answered (0: it was not down). */
  reached(): number {
    const missed = this.failures;
    this.failures = 0;
    this.downUntil = 0;
    return missed;
  }

  /** A call is being tried, or runs, on it. */
  hold(): void {
    this.inFlight++;
  }

  /** That call ended (refused, failed, or finished): a draining runner with no call left closes. */
  release(): void {
    this.inFlight--;
    if (this.leaving && this.inFlight === 0) this.close();
  }

  /** Takes no new calls; closes once those in flight have ended. */
  drain(): void {
    this.leaving = true;
    if (this.inFlight === 0) this.close();
  }

  /** Listed again while draining: takes calls again. False when it has already closed (make a new one). */
  rejoin(): boolean {
    if (this.shut) return false;
    this.leaving = false;
    return true;
  }

  /** Idempotent. */
  close(): void {
    if (this.shut) return;
    this.shut = true;
    this.leaving = true;
    this.client.close();
  }
}

/**
 * Where an LB's calls may go. Rules every pool MUST keep:
 * - runners(group) is synchronous, cheap (once per round of placement) and
 *   never throws; it lists each runner once, in a stable order (the same
 *   order on every LB for the same membership, for consistent hashing), and
 *   never a draining or closed one. An empty list means "none now": the LB
 *   tries again after a pause, until the call's timeout.
 * - need(group, mb) never throws; the function it returns is called once,
 *   when the call is over (finished, or given up), and further calls of it
 *   do nothing.
 * - close() resolves once every runner's client is closed; it is called
 *   after the calls in flight have ended. Idempotent.
 */
export interface RunnerPool {
  /** The runners calls of `group` may be placed on now. */
  runners(group: string): readonly Runner[];
  /** Every runner that takes calls, of any group (metrics). */
  everyRunner(): readonly Runner[];
  /** A call of `group` needing `memoryMB` arrived: counted until the returned function is called. */
  need(group: string, memoryMB: number): () => void;
  close(): Promise<void>;
}

const noop = (): void => undefined;

/** FN_RUNNER_ADDRESSES: the same runners, in the given order, for every group. */
export class StaticPool implements RunnerPool {
  private readonly all: readonly Runner[];

  constructor(clients: readonly RunnerConnection[]) {
    this.all = clients.map((c) => new Runner(c));
  }

  runners(_group: string): readonly Runner[] {
    return this.all;
  }

  everyRunner(): readonly Runner[] {
    return this.all;
  }

  need(): () => void {
    return noop;
  }

  async close(): Promise<void> {
    for (const r of this.all) r.close();
  }
}

export interface ManagedPoolOptions {
  /** The pool manager (FN_NPM_ADDRESS). The pool closes it. */
  readonly manager: PoolManagerApi;
  /** A client for a runner the manager lists (TLS as for any runner). */
  readonly connect: (address: string) => RunnerConnection;
  /** This LB's id in its advertisements: stable for the LB's life, unique among the LBs. */
  readonly lbId: string;
  readonly log: Logger;
  /** How often each group's membership is asked for (FNTS_NPM_POLL_MSECS). */
  readonly pollMs: number;
  /** How often the groups' needs are advertised (FNTS_NPM_ADVERTISE_MSECS). */
  readonly advertiseMs: number;
  /** Deadline of each request to the manager (default: the shorter period, at most 2 s, at least 100 ms). */
  readonly requestTimeoutMs?: number;
}

/** One runner group as this LB sees it. */
class Group {
  /** The manager's last answer, in its order; none until the first answer. */
  members: readonly Runner[] = [];
  /** MB that the group's calls waiting and running here need. */
  needMB = 0;
  /** The membership request under way, if any (one at a time, so answers apply in order). */
  asking: Promise<void> | undefined;
}

/**
 * FN_NPM_ADDRESS: each group's runners as the pool manager lists them.
 *
 * A group is asked for as soon as a call of it arrives, then every
 * `pollMs`. A runner keeps its client (and its channel, hold-down and load)
 * across answers; one the manager stops listing drains. If the manager
 * cannot be reached, the last membership stands (a manager restart does
 * not stop the calls) and the LB keeps asking. Every `advertiseMs` the LB
 * tells the manager each group's need, zero included, so that a group
 * whose calls ended is scaled down.
 */
export class ManagedPool implements RunnerPool {
  private readonly groups = new Map<string, Group>();
  /** Every runner with an open client: members of a group, and draining ones whose calls still run. */
  private readonly known = new Map<string, Runner>();
  private readonly timeoutMs: number;
  private readonly timers = new Set<NodeJS.Timeout>();
  private advertising: Promise<void> | undefined;
  private closing: Promise<void> | undefined;
  private pollFailing = false;
  private advertiseFailing = false;

  constructor(private readonly o: ManagedPoolOptions) {
    this.timeoutMs = o.requestTimeoutMs ?? Math.max(100, Math.min(2_000, o.pollMs, o.advertiseMs));
  }

  /** Starts polling and advertising. */
  start(): void {
    this.every(this.o.pollMs, () => this.refreshAll());
    this.every(this.o.advertiseMs, () => this.advertise());
  }

  runners(group: string): readonly Runner[] {
    return this.group(group).members;
  }

  everyRunner(): readonly Runner[] {
    return [...this.known.values()].filter((r) => !r.draining);
  }

  need(group: string, memoryMB: number): () => void {
    const g = this.group(group);
    g.needMB += memoryMB;
    let done = false;
    return () => {
      if (done) return;
      done = true;
      g.needMB -= memoryMB;
    };
  }

  /** Asks the manager for every group's runners once; resolves when all have answered or failed. Never rejects. */
  async refreshAll(): Promise<void> {
    await Promise.all([...this.groups.keys()].map((name) => this.refresh(name)));
  }

  /** What the LB would advertise now, per group seen. */
  snapshots(): CapacitySnapshot[] {
    return [...this.groups].map(([group, g]) => ({ group, memMbTotal: g.needMB }));
  }

  /** Tells the manager each group's need once. Never rejects. */
  advertise(): Promise<void> {
    this.advertising ??= this.send().finally(() => (this.advertising = undefined));
    return this.advertising;
  }

  close(): Promise<void> {
    this.closing ??= (async () => {
      for (const t of this.timers) clearTimeout(t);
      this.timers.clear();
      await Promise.all([this.advertising, ...[...this.groups.values()].map((g) => g.asking)]);
      // The calls are over: a last word lets the manager scale down without waiting to purge this LB.
      await this.send();
      this.o.manager.close();
      for (const r of this.known.values()) r.close();
      this.known.clear();
    })();
    return this.closing;
  }

  private group(name: string): Group {
    let g = this.groups.get(name);
    if (!g) {
      g = new Group();
      this.groups.set(name, g);
      // A new group's calls wait for its first answer: ask at once.
      if (!this.closing) void this.refresh(name);
    }
    return g;
  }

  private refresh(name: string): Promise<void> {
    const g = this.groups.get(name)!;
    g.asking ??= this.o.manager
      .getLBGroup(name, this.timeoutMs)
      .then(
        (addresses) => {
          if (this.pollFailing) this.o.log.info({ group: name }, 'the pool manager answers again');
          this.pollFailing = false;
          if (!this.closing) this.apply(name, g, addresses);
        },
        (err: unknown) => {
          if (!this.pollFailing)
            this.o.log.warn({ err, group: name }, "cannot ask the pool manager for a group's runners: placing calls on the runners it listed last (check FN_NPM_ADDRESS and that the manager runs)");
          this.pollFailing = true;
        },
      )
      .finally(() => (g.asking = undefined));
    return g.asking;
  }

  /** The manager's answer for `name`: its runners in its order; runners no group lists any more drain. */
  private apply(name: string, g: Group, addresses: readonly string[]): void {
    const members: Runner[] = [];
    const seen = new Set<string>();
    for (const address of addresses) {
      if (address === '' || seen.has(address)) continue;
      seen.add(address);
      let runner = this.known.get(address);
      if (!runner || !runner.rejoin()) {
        runner = new Runner(this.o.connect(address));
        this.known.set(address, runner);
      }
      members.push(runner);
    }
    const before = g.members.map((r) => r.address);
    g.members = members;
    const listed = new Set<Runner>();
    for (const group of this.groups.values()) for (const r of group.members) listed.add(r);
    for (const [address, r] of this.known) {
      if (!listed.has(r)) r.drain();
      if (r.closed) this.known.delete(address);
    }
    const after = members.map((r) => r.address);
    if (before.join() !== after.join()) {
      this.o.log.info({ group: name, runners: after, added: after.filter((a) => !before.includes(a)), removed: before.filter((a) => !after.includes(a)) }, 'runner group changed');
    }
  }

  private async send(): Promise<void> {
    const snapshots = this.snapshots();
    if (snapshots.length === 0) return;
    try {
      await this.o.manager.advertiseCapacity({ lbId: this.o.lbId, at: Date.now(), snapshots }, this.timeoutMs);
      if (this.advertiseFailing) this.o.log.info("the pool manager takes this LB's capacity needs again");
      this.advertiseFailing = false;
    } catch (err) {
      if (!this.advertiseFailing)
        this.o.log.warn({ err }, "cannot tell the pool manager what the runner groups need: it cannot scale them for this LB's calls until it answers (check FN_NPM_ADDRESS)");
      this.advertiseFailing = true;
    }
  }

  /** Runs `task` every `ms` (the next run `ms` after the last ended) until close. */
  private every(ms: number, task: () => Promise<void>): void {
    const schedule = (): void => {
      const t = setTimeout(() => {
        this.timers.delete(t);
        void task().then(() => {
          if (!this.closing) schedule();
        });
      }, ms);
      t.unref();
      this.timers.add(t);
    };
    schedule();
  }
}
