/**
 * The agent: runs calls in hot containers (seed 002).
 *
 * submit(call):
 *   1. take an idle container of the call's slot queue (LIFO), or wait for
 *      one until the slot deadline (half the fn's timeout) -> else 503;
 *   2. while it waits, the queue's launcher decides (needsContainer) whether
 *      to start another container, reserving its memory/CPU first (blocking,
 *      or failing fast with FN_ENABLE_NB_RESOURCE_TRACKER);
 *   3. run the call on the container until the exec deadline (the fn's
 *      timeout) -> else 504 and the container is retired;
 *   4. give the container back to the queue, idle.
 *
 * Idle containers freeze, time out, and are evicted when another function
 * waits for memory. close() refuses new calls, lets running ones finish and
 * removes every container this agent started.
 */
import { mkdir, readdir, rm, stat } from 'node:fs/promises';
import { join } from 'node:path';
import type { Readable } from 'node:stream';
import type { Logger } from 'pino';
import { ContainerStartError, DriverError, ImageError, type Driver } from '../drivers/index.js';
import { ApiError, E, FunctionError, newId } from '../models/index.js';
import type { FunctionSpec } from './call.js';
import { ColdContainer } from './cold.js';
import { HotContainer } from './hot.js';
import { containerLogs } from './logs.js';
import { INSTANCE_LABEL, instanceAlive, OWNER_LABEL, TAG_LABEL } from './owner.js';
import type { CallRequest, CallResponse, Exchange } from './protocol/call.js';
import { ResourceUnavailableError, type ResourceRequest, type ResourceToken, type ResourceTracker } from './resource.js';
import { CallTrace, type CallListener } from './trace.js';
import { needsContainer, seedNeedsContainer, SlotQueues, type SlotQueue, type SlotStats } from './slots.js';

export interface AgentConfig {
  /** Idle time before a container is paused; Infinity disables freezing. */
  readonly freezeIdleMs: number;
  /** Idle time after which a container may be evicted for another function's call. */
  readonly ejectIdleMs: number;
  /** How often a queue with waiting calls re-checks whether to start a container. */
  readonly hotPollMs: number;
  readonly hotStartTimeoutMs: number;
  /** 0 = no limit. */
  readonly maxResponseBytes: number;
  /** Host folder holding one folder per container, mounted at /tmp/iofs. */
  readonly iofsRoot: string;
  /** Whose containers these are (the data directory's identity): see owner.ts. */
  readonly owner: string;
  /** This process's identity (selfInstance()): see owner.ts. */
  readonly instance: string;
  /** FN_CONTAINER_LABEL_TAG: labels every container `fnts.tag=<tag>`. */
  readonly containerTag?: string | undefined;
  /** Fail a call at once with 503 when memory/CPU is not free right now. */
  readonly nonBlockingResources: boolean;
  /** When to start another container: fnts's rule, or seed 001's (for comparison). */
  readonly launchPolicy?: 'adaptive' | 'seed';
  /** How often a running call's container is sampled for its call record; Infinity = never. */
  readonly statsIntervalMs?: number;
}

export interface AgentOptions {
  readonly driver: Driver;
  readonly resources: ResourceTracker;
  readonly logger: Logger;
  readonly config: AgentConfig;
  /** Tells whether another instance's process runs (default: owner.ts's instanceAlive). */
  readonly isInstanceAlive?: (instance: string) => boolean | undefined;
}

/** A call started with Agent.invoke(). */
export interface RunningCall {
  readonly response: Promise<CallResponse>;
  /** Cancels the call (default reason: ClientCancelled); its response rejects with the reason. */
  cancel(reason?: unknown): void;
}

/**
 * Carries a cancel request to whatever phase the call is in. A caller that
 * leaves cancels softly: a function already working on the call may finish
 * it and keep its container. A server that stops cancels hard: the call is
 * cut at once and its container goes.
 */
class CallControl {
  reason: unknown;
  hard = false;
  onCancel: ((reason: unknown) => void) | undefined;

  cancel(reason: unknown = new ApiError(E.ClientCancelled), hard = false): void {
    if (this.reason !== undefined && (!hard || this.hard)) return;
    this.reason ??= reason;
    this.hard ||= hard;
    this.onCancel?.(this.reason);
  }
}

/** The HTTP status a failed call is recorded with. */
function statusOf(err: unknown): number {
  return err instanceof ApiError ? err.status : 500;
}

export interface AgentSnapshot {
  /** Hot containers, in any state. */
  readonly containers: number;
  /** Cold containers running a call. */
  readonly cold: number;
  readonly queues: ReadonlyArray<SlotStats & { readonly fnId: string }>;
}

const RETRY_AFTER_SECONDS = '15';

function serverBusy(): ApiError {
  return new ApiError(E.CallTimeoutServerBusy, { headers: { 'Retry-After': RETRY_AFTER_SECONDS } });
}

function shuttingDown(): ApiError {
  return new ApiError(E.ServiceUnavailable);
}

/** Why a container could not be started, as the waiting calls are told. */
function launchError(err: unknown): unknown {
  if (err instanceof ApiError) return err;
  if (err instanceof ResourceUnavailableError) return new ApiError(E.CallResourceTooBig, { cause: err });
  if (err instanceof ImageError) {
    return err.timedOut
      ? new ApiError(E.DockerPullTimeout, { message: err.message, cause: err })
      : new ApiError(E.ImageUnavailable, { message: err.message, cause: err });
  }
  if (err instanceof ContainerStartError) {
    return new FunctionError(E.ContainerInitFail, { message: `${E.ContainerInitFail.message} (${err.message})`, cause: err });
  }
  if (err instanceof DriverError) return new ApiError(E.ContainerEngine, { message: err.message, cause: err });
  return err;
}

export class AgentClosedError extends Error {
  override readonly name = 'AgentClosedError';
}

export class Agent {
  private readonly queues = new SlotQueues<HotContainer>();
  private readonly specs = new Map<string, FunctionSpec>();
  private readonly containers = new Set<HotContainer>();
  private readonly cold = new Set<ColdContainer>();
  /** Launches still waiting for resources, per queue: aborted when nobody waits for them any more. */
  private readonly reserving = new Map<SlotQueue<HotContainer>, Set<AbortController>>();
  private readonly polls = new Map<SlotQueue<HotContainer>, NodeJS.Timeout>();
  private readonly listeners: CallListener[] = [];
  /** Every call in progress, so a stopping server can cut them. */
  private readonly calls = new Set<CallControl>();
  /** Slot keys of fns changed or deleted: their containers leave service as soon as they are free. */
  private readonly stale = new Set<string>();
  /** Aborted when the agent stops: container launches (pulls, starts) end at once. */
  private readonly stopping = new AbortController();
  private evictTimer: NodeJS.Timeout | undefined;
  private evicting = false;
  private active = 0;
  private drained: (() => void) | undefined;
  private closing = false;
  private closed: Promise<void> | undefined;
  private readonly log: Logger;

  constructor(private readonly o: AgentOptions) {
    this.log = o.logger.child({ module: 'agent' });
    o.resources.onWaiter(() => this.scheduleEviction(0));
  }

  /**
   * Removes the containers an earlier, dead instance of this owner left
   * behind (it was killed), and their iofs folders; a live instance's
   * containers are left alone.
   */
  async start(): Promise<void> {
    const { owner, instance, iofsRoot } = this.o.config;
    const isAlive = this.o.isInstanceAlive ?? instanceAlive;
    const others = new Map<string, boolean | undefined>();
    const keep = new Set<string>();
    const removed = await this.o.driver.removeContainers({ [OWNER_LABEL]: owner }, (c) => {
      const of = c.labels[INSTANCE_LABEL] ?? '';
      if (of === instance) return false;
      if (!others.has(of)) others.set(of, of === '' ? false : isAlive(of));
      // Only a provably dead instance's containers go.
      if (others.get(of) === false) return true;
      keep.add(c.specId.toLowerCase());
      return false;
    });
    if (removed > 0) this.log.info({ removed }, 'removed containers left by an earlier instance');
    for (const [of, alive] of others) {
      if (alive !== false) this.log.warn({ instance: of }, 'another fnts server (shown as host/pid/start) uses this data directory: its containers are left alone');
    }
    await mkdir(iofsRoot, { recursive: true });
    // Folders of containers that are gone. A folder younger than a minute
    // may belong to a container another live instance is creating right now.
    const now = Date.now();
    for (const entry of await readdir(iofsRoot)) {
      if (keep.has(entry)) continue;
      const path = join(iofsRoot, entry);
      const info = await stat(path).catch(() => undefined);
      if (info && (others.size === 0 || now - info.mtimeMs > 60_000)) await rm(path, { recursive: true, force: true });
    }
  }

  addListener(listener: CallListener): void {
    this.listeners.push(listener);
  }

  private enter(): void {
    this.active++;
  }

  private leave(): void {
    if (--this.active === 0) this.drained?.();
  }

  /**
   * Runs one call and answers with the function's response. A streamed
   * response body holds the container until it is consumed or destroyed.
   * An aborted `signal` cancels the call (ClientCancelled).
   */
  submit(spec: FunctionSpec, req: CallRequest, signal?: AbortSignal): Promise<CallResponse> {
    const call = this.invoke(spec, req);
    if (signal) {
      if (signal.aborted) call.cancel();
      else signal.addEventListener('abort', () => call.cancel(), { once: true });
    }
    return call.response;
  }

  /**
   * submit() for the hot path: the caller cancels through the returned
   * handle, which spares an AbortController per call.
   */
  invoke(spec: FunctionSpec, req: CallRequest): RunningCall {
    const control = new CallControl();
    return { response: this.execute(spec, req, control), cancel: (reason) => control.cancel(reason) };
  }

  private async execute(spec: FunctionSpec, req: CallRequest, control: CallControl): Promise<CallResponse> {
    if (this.closing) throw serverBusy();
    if (!this.o.resources.isPossible({ memoryMB: spec.memoryMB, cpuMillis: spec.cpuMillis })) throw new ApiError(E.CallResourceTooBig);
    this.enter();
    this.calls.add(control);
    const trace = new CallTrace({ id: req.id, spec }, req, this.listeners, this.log, () => {
      this.calls.delete(control);
      this.leave();
    });
    if (spec.format === 'default') return this.executeCold(spec, req, control, trace);

    this.specs.set(spec.key, spec);
    this.stale.delete(spec.key);
    const queue = this.queues.get(spec.key);
    let deadline = new Date(Date.now() + spec.timeoutMs);
    let container: HotContainer;
    try {
      const idle = queue.tryAcquire();
      if (idle) container = idle;
      else {
        const waited = await this.waitForContainer(queue, spec, control);
        container = waited.container;
        // It waited past its slot deadline for a container started for it:
        // the start is the platform's time, the fn's timeout is the function's.
        if (waited.overdue) deadline = new Date(Date.now() + spec.timeoutMs);
      }
    } catch (err) {
      trace.end(statusOf(err), err);
      this.dropIfEmpty(queue);
      throw err;
    }
    queue.record('wait', trace.waited());
    if (control.reason !== undefined) {
      // The caller left while the container was on its way.
      this.offer(queue, container);
      trace.end(statusOf(control.reason), control.reason);
      throw control.reason;
    }

    queue.enter('run');
    const runStart = performance.now();
    let finished = false;
    let timedOut = false;
    let exchange: Exchange | undefined;
    const timer = setTimeout(() => {
      timedOut = true;
      exchange?.cancel(new FunctionError(E.CallTimeout));
    }, Math.max(0, deadline.getTime() - Date.now()));
    control.onCancel = (reason) => exchange?.cancel(reason);
    const finish = (err?: unknown): void => {
      if (finished) return;
      finished = true;
      clearTimeout(timer);
      trace.executed();
      control.onCancel = undefined;
      queue.exit('run', performance.now() - runStart);
      // A body refused for its size never reached the function: the container is fine.
      if (err !== undefined && !ApiError.is(err, E.RequestContentTooBig)) {
        void container.retire(`call failed: ${err instanceof Error ? err.message : String(err)}`);
      } else {
        this.offer(queue, container);
      }
    };

    let response: CallResponse;
    try {
      const thawing = container.claim();
      if (thawing) await thawing;
      if (timedOut) throw new FunctionError(E.CallTimeout);
      if (control.reason !== undefined) {
        // Cancelled before anything was sent: the container is untouched.
        finish();
        trace.end(statusOf(control.reason), control.reason);
        throw control.reason;
      }
      trace.started(container.takeStartTimings(), (onStat, ms) => container.watchStats(onStat, ms), this.o.config.statsIntervalMs ?? 1000);
      exchange = container.exec(req, deadline);
      const current = exchange;
      response = await new Promise<CallResponse>((resolve, reject) => {
        current.response.then(resolve, reject);
        let abandoned = false;
        control.onCancel = (reason) => {
          // A stopping server cuts the exchange: the container goes.
          if (control.hard) current.cancel(reason);
          if (abandoned) return;
          abandoned = true;
          // The caller is gone, but the function is still working on its call:
          // the container stays busy until it answers (or the deadline
          // passes), then goes back to the queue as usual.
          current.response.then(
            (r) => {
              if (Buffer.isBuffer(r.body)) finish();
              else {
                r.body.once('close', () => finish());
                r.body.destroy();
              }
            },
            (err: unknown) => finish(timedOut ? new FunctionError(E.CallTimeout) : err),
          );
          reject(reason);
        };
      });
    } catch (err) {
      if (err === control.reason) {
        trace.end(statusOf(err), err);
        throw err;
      }
      const explained = timedOut ? new FunctionError(E.CallTimeout, { cause: err }) : await container.explain(err);
      finish(explained);
      trace.end((explained as ApiError).status ?? 500, explained);
      throw explained;
    }
    control.onCancel = (reason) => {
      // Cancelled while the answer streams: drop the rest; the function has answered, so the container is fine.
      if (!Buffer.isBuffer(response.body)) response.body.destroy(reason as Error);
    };
    if (Buffer.isBuffer(response.body)) {
      finish();
      trace.end(response.status);
      return response;
    }
    // Streamed: the container stays with this call until the body is done.
    const body = response.body as Readable;
    body.once('error', (err) => {
      finish(control.reason !== undefined ? undefined : err);
      trace.end(502, err);
    });
    body.once('close', () => {
      finish(body.readableEnded || control.reason !== undefined ? undefined : new Error('response stream not consumed'));
      trace.end(response.status);
    });
    return response;
  }

  /**
   * The `default` format (seed 002's cold path): one container per call,
   * holding its memory for its whole life. The body goes to stdin, the answer
   * is stdout; the container is removed afterwards.
   */
  private async executeCold(spec: FunctionSpec, req: CallRequest, control: CallControl, trace: CallTrace): Promise<CallResponse> {
    const deadline = new Date(Date.now() + spec.timeoutMs);
    const request = { memoryMB: spec.memoryMB, cpuMillis: spec.cpuMillis };
    let token: ResourceToken;
    try {
      token = await this.reserveForCall(request, spec, control);
    } catch (err) {
      trace.end(statusOf(err), err);
      throw err;
    }
    const id = newId().toLowerCase();
    const cold = new ColdContainer({
      id,
      spec,
      driver: this.o.driver,
      labels: this.labels(spec),
      logs: containerLogs(this.o.logger, { app: spec.appName, fn: spec.fnName, container: id }),
      maxResponseBytes: this.o.config.maxResponseBytes,
    });
    this.cold.add(cold);
    try {
      // Until the container exists, a cancel aborts its preparation (an image pull).
      const preparing = new AbortController();
      control.onCancel = (reason) => preparing.abort(reason);
      const response = await cold.run(req, deadline, control, trace, this.o.config.statsIntervalMs ?? 1000, preparing.signal);
      trace.end(response.status);
      return response;
    } catch (err) {
      const answer = err === control.reason ? err : launchError(err);
      trace.end(statusOf(answer), answer);
      throw answer;
    } finally {
      await cold.remove();
      this.cold.delete(cold);
      token.close();
    }
  }

  /**
   * Memory and CPU for a cold call: at once in fail-fast mode (else 503), or
   * waited for until the slot deadline (half the fn's timeout; then 503).
   */
  private async reserveForCall(request: ResourceRequest, spec: FunctionSpec, control: CallControl): Promise<ResourceToken> {
    if (this.o.config.nonBlockingResources) {
      const token = this.o.resources.tryReserve(request);
      if (!token) throw serverBusy();
      return token;
    }
    return this.untilSlotDeadline(spec, control, (cancel, deadline) => {
      const signal = AbortSignal.any([cancel, deadline]);
      return this.o.resources.reserve(request, signal).catch((err: unknown) => {
        throw signal.aborted ? err : launchError(err);
      });
    });
  }

  private labels(spec: FunctionSpec): Record<string, string> {
    return {
      [OWNER_LABEL]: this.o.config.owner,
      [INSTANCE_LABEL]: this.o.config.instance,
      ...(this.o.config.containerTag ? { [TAG_LABEL]: this.o.config.containerTag } : {}),
      'fnts.app_id': spec.appId,
      'fnts.app_name': spec.appName,
      'fnts.fn_id': spec.fnId,
      'fnts.fn_name': spec.fnName,
    };
  }

  /**
   * Waits for a container of `queue` until the slot deadline (half the fn's
   * timeout; then 503), or past it while a container is being started for
   * this call (it then gets that container or the start's error), or until
   * the caller cancels. `overdue`: it waited past the slot deadline.
   */
  private async waitForContainer(
    queue: SlotQueue<HotContainer>,
    spec: FunctionSpec,
    control: CallControl,
  ): Promise<{ container: HotContainer; overdue: boolean }> {
    try {
      let overdue = false;
      const container = await this.untilSlotDeadline(spec, control, (cancel, deadline) => {
        const acquired = queue.acquire(cancel, deadline);
        this.checkLaunch(queue, spec);
        this.ensurePoll(queue, spec);
        return acquired.then((c) => {
          overdue = deadline.aborted;
          return c;
        });
      });
      return { container, overdue };
    } finally {
      this.trimReservations(queue);
    }
  }

  /**
   * Runs `wait` until the slot deadline (half the fn's timeout; then 503
   * Timed out - server too busy) or the caller's cancel (its reason is
   * thrown). `wait` gets the cancel signal and the slot deadline apart, for
   * waits that may outlive the deadline (see SlotQueue.acquire).
   */
  private async untilSlotDeadline<T>(spec: FunctionSpec, control: CallControl, wait: (cancel: AbortSignal, deadline: AbortSignal) => Promise<T>): Promise<T> {
    const slotTimeout = AbortSignal.timeout(Math.max(1, spec.timeoutMs / 2));
    const cancelled = new AbortController();
    control.onCancel = (reason) => cancelled.abort(reason);
    try {
      return await wait(cancelled.signal, slotTimeout);
    } catch (err) {
      if (control.reason !== undefined) throw control.reason;
      if (slotTimeout.aborted && (err as { name?: string } | null)?.name === 'TimeoutError') throw serverBusy();
      throw err;
    } finally {
      control.onCancel = undefined;
    }
  }

  /** Starts containers for `queue` while the launch decision says so. */
  private checkLaunch(queue: SlotQueue<HotContainer>, spec: FunctionSpec): void {
    const needed = this.o.config.launchPolicy === 'seed' ? seedNeedsContainer : needsContainer;
    while (!this.closing && needed(queue.stats())) {
      queue.enter('start');
      this.launch(queue, spec).catch((err: unknown) => this.log.error({ err, fn: spec.fnId }, 'container launch failed unexpectedly'));
    }
  }

  private ensurePoll(queue: SlotQueue<HotContainer>, spec: FunctionSpec): void {
    if (this.polls.has(queue)) return;
    const timer = setInterval(() => {
      if (queue.stats().waiting === 0 || this.closing) {
        clearInterval(timer);
        this.polls.delete(queue);
        return;
      }
      this.checkLaunch(queue, spec);
    }, this.o.config.hotPollMs);
    timer.unref();
    this.polls.set(queue, timer);
  }

  /** Aborts resource waits beyond the number of calls still waiting. */
  private trimReservations(queue: SlotQueue<HotContainer>): void {
    const pending = this.reserving.get(queue);
    if (!pending) return;
    let excess = pending.size - queue.stats().waiting;
    for (const ctl of [...pending].reverse()) {
      if (excess-- <= 0) break;
      ctl.abort();
    }
  }

  /**
   * Reserves memory/CPU for a new container of `queue`, starts it and
   * offers it to the queue. Once it holds its resources the launch is tied
   * to the oldest waiting call (see SlotQueue.launch): that call hears this
   * start's outcome even past its slot deadline. A failed start fails every
   * waiting call with its reason (the next would fail the same way).
   */
  private async launch(queue: SlotQueue<HotContainer>, spec: FunctionSpec): Promise<void> {
    this.enter();
    try {
      const request = { memoryMB: spec.memoryMB, cpuMillis: spec.cpuMillis };
      let token;
      if (this.o.config.nonBlockingResources) {
        token = this.o.resources.tryReserve(request);
        if (!token) {
          // Fail-fast mode: the call that caused this launch is told at once.
          queue.exit('start');
          queue.failOldestWaiter(serverBusy());
          this.dropIfEmpty(queue);
          return;
        }
      } else {
        const ctl = new AbortController();
        let pending = this.reserving.get(queue);
        if (!pending) this.reserving.set(queue, (pending = new Set()));
        pending.add(ctl);
        try {
          token = await this.o.resources.reserve(request, ctl.signal);
        } catch (err) {
          queue.exit('start');
          if (!ctl.signal.aborted) queue.failWaiters(launchError(err));
          this.dropIfEmpty(queue);
          return;
        } finally {
          pending.delete(ctl);
          if (pending.size === 0) this.reserving.delete(queue);
        }
      }
      if (this.closing) {
        token.close();
        queue.exit('start');
        this.dropIfEmpty(queue);
        return;
      }

      const t0 = performance.now();
      const launched = queue.launch();
      const id = newId().toLowerCase();
      const container: HotContainer = new HotContainer({
        id,
        spec,
        driver: this.o.driver,
        token,
        dir: join(this.o.config.iofsRoot, id),
        labels: this.labels(spec),
        logs: containerLogs(this.o.logger, { app: spec.appName, fn: spec.fnName, container: id }),
        log: this.log,
        startTimeoutMs: this.o.config.hotStartTimeoutMs,
        freezeIdleMs: this.o.config.freezeIdleMs,
        maxResponseBytes: this.o.config.maxResponseBytes,
        onRetired: (c, reason) => this.onRetired(c, reason),
        onIdleTimeout: (c) => {
          if (this.queues.peek(c.spec.key)?.remove(c)) void c.retire('idle timeout');
        },
      });
      this.containers.add(container);
      try {
        await container.start(this.stopping.signal);
      } catch (err) {
        queue.exit('start');
        const reason = this.closing ? shuttingDown() : launchError(err);
        if (!this.closing) this.log.warn({ fn: spec.fnId, image: spec.image, err: reason }, 'container failed to start');
        queue.failWaiters(reason);
        launched();
        this.dropIfEmpty(queue);
        return;
      }
      queue.exit('start', performance.now() - t0);
      this.log.debug({ fn: spec.fnId, container: id, ms: Math.round(performance.now() - t0) }, 'hot container ready');
      this.offer(queue, container);
      launched();
      this.checkLaunch(queue, spec);
    } finally {
      this.leave();
    }
  }

  /**
   * A container is free (just started, or done with a call): it goes to the
   * oldest waiting call, or idles in its queue. It leaves service instead
   * when its stream cannot be trusted, or when its fn changed and no call of
   * the old definition is still waiting for it.
   */
  private offer(queue: SlotQueue<HotContainer>, c: HotContainer): void {
    if (c.state === 'retired') return;
    if (this.closing) {
      void c.retire('server shutting down');
      return;
    }
    if (c.spent) {
      void c.retire('container stream spent');
      return;
    }
    if (this.stale.has(c.spec.key) && queue.stats().waiting === 0) {
      void c.retire('function changed');
      return;
    }
    c.markIdle();
    queue.release(c);
  }

  private onRetired(c: HotContainer, reason: string): void {
    this.containers.delete(c);
    this.log.debug({ fn: c.spec.fnId, container: c.id, reason, calls: c.calls }, 'hot container retired');
    const queue = this.queues.peek(c.spec.key);
    if (!queue) return;
    queue.remove(c);
    // Calls still waiting need a replacement.
    if (!this.closing && queue.stats().waiting > 0) this.checkLaunch(queue, c.spec);
    this.dropIfEmpty(queue);
  }

  private dropIfEmpty(queue: SlotQueue<HotContainer>): void {
    if (this.queues.dropIfEmpty(queue)) {
      this.specs.delete(queue.key);
      this.stale.delete(queue.key);
      const poll = this.polls.get(queue);
      if (poll) clearInterval(poll);
      this.polls.delete(queue);
    }
  }

  // ---- eviction: idle containers make room for another function's call

  private scheduleEviction(delayMs: number): void {
    if (this.evictTimer || this.closing) return;
    this.evictTimer = setTimeout(() => {
      this.evictTimer = undefined;
      this.evictIdle().catch((err: unknown) => this.log.error({ err }, 'eviction failed'));
    }, delayMs);
    this.evictTimer.unref();
  }

  /**
   * While a launch waits for memory, retires the least recently used idle
   * container that has been idle at least FN_EJECT_IDLE_MSECS, one at a time
   * (each frees its memory when it is gone), skipping queues that are
   * themselves waiting to launch.
   */
  private async evictIdle(): Promise<void> {
    if (this.evicting || this.o.resources.waiterCount === 0) return;
    this.evicting = true;
    try {
      const now = performance.now();
      const eject = this.o.config.ejectIdleMs;
      let soonest = Infinity;
      const candidates = [...this.containers].filter((c) => c.state === 'idle').sort((a, b) => a.idleSince - b.idleSince);
      for (const c of candidates) {
        const queue = this.queues.peek(c.spec.key);
        if (!queue || this.reserving.has(queue)) continue;
        const eligibleAt = c.idleSince + eject;
        if (eligibleAt > now) {
          soonest = Math.min(soonest, eligibleAt);
          continue;
        }
        if (!queue.remove(c)) continue;
        this.log.info({ fn: c.spec.fnId, container: c.id }, 'evicting idle container: another function waits for memory');
        await c.retire('evicted for another function');
        soonest = now;
        break;
      }
      if (this.o.resources.waiterCount > 0) this.scheduleEviction(Number.isFinite(soonest) ? Math.max(0, soonest - performance.now()) : eject);
    } finally {
      this.evicting = false;
    }
  }

  // ---- changes and shutdown

  /**
   * A fn (or every fn of an app) changed or was deleted: its idle
   * containers leave service now, busy and starting ones as soon as they are
   * free (after serving any call of the old definition still waiting). New
   * calls get containers of the new definition, since its slot key differs;
   * a new call that arrives with the same key shows the key is still
   * current (only, say, an annotation changed), and it stays in service.
   */
  retireFunction(match: { fnId?: string; appId?: string }): void {
    const matches = (spec: FunctionSpec): boolean => (!match.fnId || spec.fnId === match.fnId) && (!match.appId || spec.appId === match.appId);
    for (const [key, spec] of this.specs) if (matches(spec)) this.stale.add(key);
    for (const c of this.containers) {
      if (!matches(c.spec)) continue;
      this.stale.add(c.spec.key);
      if (c.state === 'idle' && this.queues.peek(c.spec.key)?.remove(c)) void c.retire('function changed');
    }
  }

  snapshot(): AgentSnapshot {
    return {
      containers: this.containers.size,
      cold: this.cold.size,
      queues: this.queues.all().map((q) => ({ ...q.stats(), fnId: this.specs.get(q.key)?.fnId ?? '' })),
    };
  }

  /**
   * Cuts every call in progress now (they fail with 503 Service is shutting
   * down, their containers go) and every container start; close() then
   * completes without waiting for calls. For a bounded shutdown.
   */
  abort(): void {
    this.closing = true;
    this.stopping.abort(shuttingDown());
    for (const call of [...this.calls]) call.cancel(shuttingDown(), true);
  }

  /**
   * Refuses new calls, fails those still waiting for a container (503), lets
   * running ones finish, then removes every container this process started,
   * those still starting included. Idempotent; abort() makes it quick.
   */
  close(): Promise<void> {
    this.closed ??= (async () => {
      this.closing = true;
      this.stopping.abort(shuttingDown());
      for (const q of this.queues.all()) q.failWaiters(serverBusy());
      for (const pending of this.reserving.values()) for (const ctl of pending) ctl.abort();
      for (const t of this.polls.values()) clearInterval(t);
      this.polls.clear();
      clearTimeout(this.evictTimer);
      if (this.active > 0) await new Promise<void>((resolve) => (this.drained = resolve));
      await Promise.all([...this.containers].map((c) => c.retire('server shutting down')));
      await Promise.all([...this.cold].map((c) => c.remove()));
      // Whatever is left of this process's containers (one whose creation
      // raced the shutdown) goes too.
      await this.o.driver
        .removeContainers({ [OWNER_LABEL]: this.o.config.owner, [INSTANCE_LABEL]: this.o.config.instance })
        .catch((err: unknown) => this.log.warn({ err }, 'could not list this server\'s containers to remove them'));
      await this.o.driver.close();
    })();
    return this.closed;
  }
}
