/**
 * The hot containers of one slot key (see slots.ts): its slot queue, the spec
 * its containers are made from, the launches in progress and their
 * resource reservations, and the poll that re-checks the launch decision
 * while calls wait.
 *
 *              ┌────────── offer (free again) ◀──────────┐
 *   launch ──▶ idle stack (LIFO) ──acquire──▶ busy (a call) ┘
 *      ▲            │ idle timeout, evicted, fn changed
 *      │            ▼
 *   waiters    retired (removed, token released)
 *
 * A call waits here until the slot deadline; while it waits, the launch
 * decision (needsContainer) may start containers for the queue.
 */
import { join } from 'node:path';
import type { Logger } from 'pino';
import { ContainerStartError, DriverError, ImageError, type Driver } from '../drivers/index.js';
import type { SocketDirs } from './iofs.js';
import type { AgentSecrets } from './secrets.js';
import { ApiError, E, FunctionError, newId } from '../models/index.js';
import type { AgentConfig } from './settings.js';
import type { Clock, Timer } from './clock.js';
import type { ContainerStates } from './events.js';
import { HotContainer, type RetireReason } from './hot.js';
import { ContainerOutput } from './logs.js';
import { ResourceUnavailableError, type ResourceRequest, type ResourceToken, type ResourceTracker } from './resource.js';
import { responseLimit } from './protocol/call.js';
import { needsContainer, seedNeedsContainer, SlotQueue } from './slots.js';
import type { FunctionSpec } from './spec.js';
import type { CallSpans } from './spans.js';
import type { Keeper } from './prewarm.js';

export { serverBusy, shuttingDown } from '../call/index.js';
import { serverBusy, shuttingDown } from '../call/index.js';

/** A container's secrets folder: beside its socket folder, in this process's folder (swept with it after a crash). */
export function secretsFolder(socketFolder: string, containerId: string): string {
  return join(socketFolder, `${containerId}.secrets`);
}

/**
 * Runs `wait` until the slot deadline (half the fn's timeout; then 503
 * Timed out - server too busy) or `cancel` (its reason is thrown). `wait`
 * gets the deadline apart from the cancel, for waits that may outlive the
 * deadline (see SlotQueue.acquire).
 */
export async function untilSlotDeadline<T>(spec: FunctionSpec, cancel: AbortSignal, wait: (deadline: AbortSignal) => Promise<T>): Promise<T> {
  const deadline = AbortSignal.timeout(Math.max(1, spec.timeoutMs / 2));
  try {
    return await wait(deadline);
  } catch (err) {
    if (cancel.aborted) throw cancel.reason;
    if (deadline.aborted && (err as { name?: string } | null)?.name === 'TimeoutError') throw serverBusy();
    throw err;
  }
}

/** Why a container could not be started, as the waiting calls are told. */
export function launchError(err: unknown): unknown {
  if (err instanceof ApiError) return err;
  if (err instanceof ResourceUnavailableError) return new ApiError(E.CallResourceTooBig, { cause: err });
  if (err instanceof ImageError) {
    return err.timedOut ? new ApiError(E.DockerPullTimeout, { message: err.message, cause: err }) : new ApiError(E.ImageUnavailable, { message: err.message, cause: err });
  }
  if (err instanceof ContainerStartError) {
    return new FunctionError(E.ContainerInitFail, { message: `${E.ContainerInitFail.message} (${err.message})`, cause: err });
  }
  if (err instanceof DriverError) return new ApiError(E.ContainerEngine, { message: err.message, cause: err });
  return err;
}

/** What a pool uses of its agent. */
export interface PoolHost {
  readonly driver: Driver;
  readonly resources: ResourceTracker;
  readonly config: AgentConfig;
  /** Where this process's containers get their socket folders (owner.ts). */
  readonly socketFolder: string;
  /** How containers' socket folders are made (iofs.ts). */
  readonly socketDirs: SocketDirs;
  /** Where fns' secrets come from and how containers get them (secrets.ts); undefined: containers get none. */
  readonly secrets: AgentSecrets | undefined;
  readonly clock: Clock;
  readonly log: Logger;
  /** The server's logger, for containers' output (at info, paced per container). */
  readonly logger: Logger;
  /** Aborted when the agent stops: launches end at once. */
  readonly stopping: AbortSignal;
  /** Aborted when the agent cuts every call (abort()): calls still running end at once. */
  readonly cutting: AbortSignal;
  readonly closing: boolean;
  /** Work the agent's close() waits for. */
  enter(): void;
  leave(): void;
  labels(spec: FunctionSpec): Record<string, string>;
  /** A new container's (or launch's) states, for the container listeners. */
  containerStates(id: string, spec: FunctionSpec): ContainerStates;
  /** A container of this pool exists (in any state) / is gone. */
  adopt(c: HotContainer): void;
  forget(c: HotContainer): void;
  /** A cold container exists until forgetCold(); `remove` removes it (for shutdown). */
  adoptCold(id: string, remove: () => Promise<void> | undefined): void;
  forgetCold(id: string): void;
  /** The pool holds nothing any more: drop it. */
  dropped(pool: SlotPool): void;
  /**
   * Reserves `req` at once or not at all (FN_ENABLE_NB_RESOURCE_TRACKER);
   * a refusal also starts evicting idle containers of other fns, so that a
   * later call fits. Never throws.
   */
  tryReserve(req: ResourceRequest): ResourceToken | null;
  /** The calls' spans, when tracing is on: containers' starts become spans too. */
  readonly spans: CallSpans | undefined;
  /** The keep-alive policy: how long idle containers stay, when to pre-warm. */
  readonly keeper: Keeper;
}

export class SlotPool {
  readonly queue: SlotQueue<HotContainer>;
  /** The fn changed or was deleted: containers leave service as soon as they are free and no call of the old definition waits. */
  stale = false;
  /** Launches still waiting for resources: aborted when nobody waits for them any more. */
  private readonly reserving = new Set<AbortController>();
  /**
   * Sync calls waiting here. The pool serves the fn's sync and detached
   * calls alike (spec.ts); a new container is paid as its waiters may pay:
   * from anywhere while a sync call waits, else from the async area only.
   */
  private syncWaiting = 0;
  private poll: Timer | undefined;
  /** A check, a turn later, that the pool is still empty before it is dropped. */
  private dropCheck: NodeJS.Immediate | undefined;

  constructor(
    readonly spec: FunctionSpec,
    private readonly host: PoolHost,
  ) {
    this.queue = new SlotQueue<HotContainer>(spec.key);
  }

  get key(): string {
    return this.spec.key;
  }

  /** Aborted when the agent cuts every call. */
  get cutting(): AbortSignal {
    return this.host.cutting;
  }

  /** A launch of this pool waits for memory/CPU (its idle containers are spared by the evictor). */
  get isReserving(): boolean {
    return this.reserving.size > 0;
  }

  /**
   * Waits for a container until `deadline` (the slot deadline), or past it
   * while a container is being started for this call (it then gets that
   * container or the start's error), or until `cancel` aborts.
   * `overdue`: it waited past the slot deadline.
   */
  async acquire(cancel: AbortSignal, deadline: AbortSignal, detached = false): Promise<{ container: HotContainer; overdue: boolean }> {
    if (!detached) this.syncWaiting++;
    try {
      const acquired = this.queue.acquire(cancel, deadline);
      this.checkLaunch();
      this.ensurePoll();
      const container = await acquired;
      return { container, overdue: deadline.aborted };
    } finally {
      if (!detached) this.syncWaiting--;
      this.trimReservations();
    }
  }

  /** Starts containers while the launch decision says so. */
  checkLaunch(): void {
    const needed = this.host.config.launchPolicy === 'seed' ? seedNeedsContainer : needsContainer;
    while (!this.host.closing && needed(this.queue.stats())) {
      this.queue.enter('start');
      this.launch().catch((err: unknown) => this.host.log.error({ err, fn: this.spec.fnId }, 'container launch failed unexpectedly'));
    }
  }

  private ensurePoll(): void {
    if (this.poll) return;
    const tick = (): void => {
      this.poll = undefined;
      if (this.queue.stats().waiting === 0 || this.host.closing) return;
      this.checkLaunch();
      this.poll = this.host.clock.setTimeout(tick, this.host.config.hotPollMs);
    };
    this.poll = this.host.clock.setTimeout(tick, this.host.config.hotPollMs);
  }

  /** Aborts resource waits beyond the number of calls still waiting. */
  private trimReservations(): void {
    let excess = this.reserving.size - this.queue.stats().waiting;
    for (const ctl of [...this.reserving].reverse()) {
      if (excess-- <= 0) break;
      ctl.abort();
    }
  }

  /** Memory and CPU for a new container: at once in fail-fast mode (else null), or waited for. */
  private async reserve(): Promise<ResourceToken | null | 'aborted'> {
    const { spec, host } = this;
    const request = spec.requests[this.syncWaiting > 0 ? 'sync' : 'detached'];
    if (host.config.nonBlockingResources) return host.tryReserve(request);
    const ctl = new AbortController();
    this.reserving.add(ctl);
    try {
      return await host.resources.reserve(request, ctl.signal);
    } catch (err) {
      if (ctl.signal.aborted) return 'aborted';
      throw err;
    } finally {
      this.reserving.delete(ctl);
    }
  }

  /**
   * Reserves memory/CPU for a new container, starts it and offers it to the
   * queue. Once it holds its resources the launch is tied to the oldest
   * waiting call (see SlotQueue.launch): that call hears this start's
   * outcome even past its slot deadline. A failed start fails every waiting
   * call with its reason (the next would fail the same way).
   */
  private async launch(): Promise<void> {
    const { spec, host, queue } = this;
    host.enter();
    const id = newId().toLowerCase();
    const states = host.containerStates(id, spec);
    states.to('wait');
    try {
      let token: ResourceToken | null | 'aborted';
      let tokenMs = 0;
      try {
        const asked = performance.now();
        token = await this.reserve();
        tokenMs = performance.now() - asked;
      } catch (err) {
        states.end();
        queue.exit('start');
        queue.failWaiters(launchError(err));
        this.dropIfEmpty();
        return;
      }
      if (token === null) {
        // Fail-fast mode: the call that caused this launch is told at once.
        states.end();
        queue.exit('start');
        queue.failOldestWaiter(serverBusy());
        this.dropIfEmpty();
        return;
      }
      if (token === 'aborted' || host.closing) {
        if (token !== 'aborted') token.close();
        states.end();
        queue.exit('start');
        this.dropIfEmpty();
        return;
      }

      const t0 = performance.now();
      const launched = queue.launch();
      const container = this.container(id, states, token, tokenMs);
      host.adopt(container);
      try {
        await container.start(host.stopping);
      } catch (err) {
        queue.exit('start');
        const reason = host.closing ? shuttingDown() : launchError(err);
        if (!host.closing) host.log.warn({ fn: spec.fnId, image: spec.image, err: reason }, 'container failed to start');
        queue.failWaiters(reason);
        launched();
        this.dropIfEmpty();
        return;
      }
      queue.exit('start', performance.now() - t0);
      host.log.debug({ fn: spec.fnId, container: id, ms: Math.round(performance.now() - t0) }, 'hot container ready');
      this.offer(container);
      launched();
      this.checkLaunch();
    } finally {
      host.leave();
    }
  }

  /** A new container of this pool, holding `token`. */
  private container(id: string, states: ContainerStates, token: ResourceToken, tokenMs: number): HotContainer {
    const { spec, host, queue } = this;
    return new HotContainer({
      id,
      spec,
      states,
      tokenMs,
      driver: host.driver,
      token,
      dir: join(host.socketFolder, id),
      dirs: host.socketDirs,
      secrets: host.secrets,
      secretsDir: secretsFolder(host.socketFolder, id),
      labels: host.labels(spec),
      output: new ContainerOutput(host.logger, host.clock, spec, id),
      log: host.log,
      clock: host.clock,
      startTimeoutMs: host.config.hotStartTimeoutMs,
      freezeIdleMs: host.config.freezeIdleMs,
      responseLimit: responseLimit(host.config.maxResponseBytes),
      spans: host.spans,
      onRetired: (c, reason, detail) => this.onRetired(c, reason, detail),
      onIdleTimeout: (c) => {
        if (queue.remove(c)) void c.retire('idle', 'idle timeout');
      },
    });
  }

  /**
   * Starts one container ahead of demand (the keep-alive policy expects a
   * call), idle for at most `keepMs` once ready; nothing when the pool has
   * a container or a call already (never more than one ahead of demand).
   * Its memory comes only from what is free now: no waiting, no eviction.
   * Never rejects: a pre-warm that cannot be is logged and dropped.
   */
  async prewarm(keepMs: number): Promise<void> {
    const { spec, host, queue } = this;
    const s = queue.stats();
    if (host.closing || this.stale || s.idle + s.starting + s.running + s.waiting > 0) return this.dropIfEmpty();
    const token = host.resources.tryReserve(spec.requests.sync);
    if (!token) {
      host.log.debug({ fn: spec.fnId }, 'no free memory to pre-warm a container');
      return this.dropIfEmpty();
    }
    host.enter();
    const id = newId().toLowerCase();
    const states = host.containerStates(id, spec);
    const container = this.container(id, states, token, 0);
    host.adopt(container);
    queue.enter('start');
    const t0 = performance.now();
    try {
      await container.start(host.stopping);
      queue.exit('start', performance.now() - t0);
      container.markPrewarmed();
      if (this.queue.waitingCount > 0) this.offer(container);
      else this.offerIdle(container, keepMs);
    } catch (err) {
      // start() retired it; calls that came meanwhile get a container of their own.
      queue.exit('start');
      if (!host.closing) host.log.info({ fn: spec.fnId, err }, 'a pre-warm failed to start its container');
      if (!host.closing && queue.stats().waiting > 0) this.checkLaunch();
      this.dropIfEmpty();
    } finally {
      host.leave();
    }
  }

  /**
   * A container is free (just started, or done with a call): it goes to the
   * oldest waiting call, or idles in the queue. It leaves service instead
   * when its stream cannot be trusted, or when its fn changed and no call of
   * the old definition is still waiting for it.
   */
  offer(c: HotContainer): void {
    if (c.state === 'retired') return;
    if (this.host.closing) {
      void c.retire('shutdown', 'server shutting down');
      return;
    }
    if (c.spent) {
      void c.retire('failed', 'container stream spent');
      return;
    }
    if (this.stale && this.queue.stats().waiting === 0) {
      void c.retire('changed', 'function changed');
      return;
    }
    if (this.queue.waitingCount > 0) {
      c.markIdle();
      this.queue.release(c);
      return;
    }
    this.offerIdle(c, this.host.keeper.idle(this.spec, this.queue.latencyOf('start')));
  }

  /** Nobody waits: `c` idles for `keepMs`, or goes now when that is 0 (the policy expects no call soon). */
  private offerIdle(c: HotContainer, keepMs: number): void {
    if (keepMs <= 0) {
      void c.retire('idle', 'released: the keep-alive policy expects no call soon');
      return;
    }
    c.markIdle(keepMs);
    this.queue.release(c);
  }

  /** A call of this pool's fn starts / ends (for the keep-alive policy). */
  callStarted(): void {
    this.host.keeper.callStarted(this.spec);
  }

  callEnded(): void {
    this.host.keeper.callEnded(this.spec);
  }

  /** The fn changed: idle containers leave now, busy and starting ones once free. */
  retireStale(): void {
    this.stale = true;
    for (const c of [...this.queue.idleItems()]) if (this.queue.remove(c)) void c.retire('changed', 'function changed');
  }

  private onRetired(c: HotContainer, reason: RetireReason, detail: string): void {
    this.host.forget(c);
    this.host.log.debug({ fn: c.spec.fnId, container: c.id, reason, detail, calls: c.calls }, 'hot container retired');
    this.queue.remove(c);
    // Calls still waiting need a replacement.
    if (!this.host.closing && this.queue.stats().waiting > 0) this.checkLaunch();
    this.dropIfEmpty();
  }

  /**
   * Drops the pool from its agent when nothing is left in it, checked again
   * a turn later: a container just handed to a waiting call is in no count
   * until that call runs on it (a few promise turns on), and a pool dropped
   * meanwhile (say by the launch that call no longer needs) would strand
   * the container idle where neither calls nor the evictor find it.
   */
  dropIfEmpty(): void {
    if (!this.queue.isEmpty() || this.dropCheck) return;
    this.dropCheck = setImmediate(() => {
      this.dropCheck = undefined;
      if (!this.queue.isEmpty()) return;
      this.poll?.clear();
      this.poll = undefined;
      this.host.dropped(this);
    });
  }

  /** Stops launching: waiting calls fail with `reason`, resource waits end. */
  close(reason: unknown): void {
    this.queue.failWaiters(reason);
    for (const ctl of this.reserving) ctl.abort();
    this.poll?.clear();
    this.poll = undefined;
  }
}
