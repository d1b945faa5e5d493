/**
 * The agent: the local Invoker. Runs calls in hot containers (as Fn's agent does) or,
 * for the `default` format, one cold container per call.
 *
 *   invoke(call) -> the call's spec (per fn version and call type)
 *     -> hot: its slot key's pool (pool.ts): an idle container, or wait for
 *        one while the pool's launcher starts containers (hot-call.ts)
 *     -> cold: reserve memory, run one container (cold.ts)
 *
 * Idle containers freeze and time out (hot.ts); the evictor (evictor.ts)
 * removes idle ones when another function waits for memory. A change to a
 * fn (from the change feed) retires its containers once they are free.
 * close() refuses new calls, lets running ones finish and removes every
 * container this agent started.
 */
import { setMaxListeners } from 'node:events';
import type { Logger } from 'pino';
import type { Driver } from '../drivers/index.js';
import { ApiError, E, errorCode, type Call, type CallOutcome, type ChangeFeed, type ResourceChange } from '../models/index.js';
import { realClock, type Clock } from './clock.js';
import { CallCancel } from './cancel.js';
import { runColdCall } from './cold.js';
import type { AgentConfig } from './settings.js';
import { Evictor } from './evictor.js';
import { runHotCall } from './hot-call.js';
import { HistogramKeepAlive, keepAlivePolicy, type KeepAlivePolicy } from './keepalive.js';
import { HistogramPersistence, type HistogramStore } from './keepalive-store.js';
import { Keeper } from './prewarm.js';
import type { HotContainer } from './hot.js';
import type { CancelReason, Invoker, RunningCall } from '../call/index.js';
import { plainSocketDirs, removeSocketTree, type SocketDirs } from './iofs.js';
import type { AgentSecrets } from './secrets.js';
import { claimSocketFolder, INSTANCE_LABEL, instanceAlive, OWNER_LABEL, socketFolder, sweepSocketFolders, TAG_LABEL } from './owner.js';
import { serverBusy, shuttingDown, SlotPool, type PoolHost } from './pool.js';
import { ContainerStates, type ContainerListener } from './events.js';
import type { CallSpans } from './spans.js';
import type { CallBody, CallRequest, CallResponse } from './protocol/call.js';
import type { ResourceRequest, ResourceToken, ResourceTracker } from './resource.js';
import type { SlotStats } from './slots.js';
import { functionSpec, type FunctionSpec } from './spec.js';
import { CallTrace, statusOf, type CallListener } from './trace.js';

export interface AgentOptions {
  readonly driver: Driver;
  readonly resources: ResourceTracker;
  readonly logger: Logger;
  readonly config: AgentConfig;
  /** Changes to apps and fns: containers of a changed fn leave service once free. */
  readonly changes?: ChangeFeed;
  /** Drives idle clocks, freezing, eviction and launch polls (default: real time). */
  readonly clock?: Clock;
  /** Tells whether another instance's process runs (default: owner.ts's instanceAlive). */
  readonly isInstanceAlive?: (instance: string) => boolean | undefined;
  /** Each call's spans, when tracing is on (none at all when off). */
  readonly spans?: CallSpans;
  /** How containers' socket folders are made (iofs.ts's socketDirs()); default: plain folders (tests of the scheduling logic). */
  readonly socketDirs?: SocketDirs;
  /** Where fns' secrets come from and how containers get them as files (secrets.ts); none: containers get no /run/secrets. */
  readonly secrets?: AgentSecrets;
  /** The keep-alive policy (default: FNTS_KEEPALIVE_POLICY's, keepalive.ts). */
  readonly keepAlive?: KeepAlivePolicy;
  /** Where the histogram policy's histograms survive restarts (keepalive-store.ts); none: learned again after each. */
  readonly histograms?: HistogramStore;
}

export interface AgentSnapshot {
  /** Hot containers, in any state. */
  readonly containers: number;
  /** Cold containers running a call. */
  readonly cold: number;
  readonly queues: ReadonlyArray<SlotStats & { readonly fnId: string }>;
}

/** A call in progress: its one cancel, its outcome on demand. */
class CallHandle implements RunningCall {
  readonly cancelled = new CallCancel();
  response!: Promise<CallResponse>;
  trace: CallTrace | undefined;
  private early: Promise<CallOutcome> | undefined;

  constructor(private readonly call: Call) {}

  get outcome(): Promise<CallOutcome> {
    if (this.trace) return this.trace.outcome();
    // Refused before it began (the agent is closing, the fn can never fit).
    this.early ??= this.response.then(
      () => {
        throw new Error('unreachable: a call with a response has a trace');
      },
      (err: unknown) => refusedOutcome(this.call, err),
    );
    return this.early;
  }

  get log(): Promise<string> {
    return this.trace ? this.trace.logText() : Promise.resolve('');
  }

  cancel(reason: CancelReason = 'client-left'): void {
    this.cancelled.cancel(reason);
  }
}

function refusedOutcome(call: Call, err: unknown): CallOutcome {
  const httpStatus = statusOf(err);
  const now = new Date().toISOString();
  return {
    id: call.id,
    status: httpStatus === 504 ? 'timeout' : 'error',
    httpStatus,
    error: err instanceof Error ? err.message : String(err),
    code: errorCode(err),
    errorUser: false,
    ran: false,
    createdAt: new Date(call.createdAt).toISOString(),
    completedAt: now,
    timings: { wait_ms: 0, exec_ms: 0 },
    stats: [],
  };
}

export class Agent implements Invoker, PoolHost {
  readonly driver: Driver;
  readonly resources: ResourceTracker;
  readonly config: AgentConfig;
  readonly clock: Clock;
  readonly log: Logger;
  readonly logger: Logger;
  /** This process's folder for its containers' socket folders, under FN_IOFS_PATH (owner.ts); made by start(). */
  readonly socketFolder: string;
  /** How its containers' socket folders are made. */
  readonly socketDirs: SocketDirs;
  /** Where fns' secrets come from, and how containers get them. */
  readonly secrets: AgentSecrets | undefined;
  private readonly pools = new Map<string, SlotPool>();
  private readonly containers = new Set<HotContainer>();
  private readonly cold = new Map<string, () => Promise<void> | undefined>();
  private readonly listeners: CallListener[] = [];
  private readonly containerListeners: ContainerListener[] = [];
  /** Every call in progress, so a stopping server can cut them. */
  private readonly calls = new Set<CallHandle>();
  /** Aborted when the agent stops: container launches (pulls, starts) end at once. */
  private readonly stop = new AbortController();
  /** Aborted by abort(): calls still running are cut. */
  private readonly cut = new AbortController();
  private readonly evictor: Evictor;
  /** How long idle containers stay, and pre-warms (prewarm.ts). */
  readonly keeper: Keeper;
  private readonly histograms: HistogramPersistence | undefined;
  private readonly unsubscribe: () => void;
  private active = 0;
  /** Sync calls between execute and their end. */
  private syncCalls = 0;
  private drained: (() => void) | undefined;
  closing = false;
  private closed: Promise<void> | undefined;

  constructor(private readonly o: AgentOptions) {
    this.driver = o.driver;
    this.resources = o.resources;
    this.config = o.config;
    this.clock = o.clock ?? realClock;
    this.logger = o.logger;
    this.log = o.logger.child({ module: 'agent' });
    this.socketFolder = socketFolder(o.config.iofsPath, o.config.instance);
    this.socketDirs = o.socketDirs ?? plainSocketDirs;
    this.secrets = o.secrets;
    // Every container start (and every call abandoned while running) listens
    // to these for as long as it lasts: many at once is normal, not a leak.
    setMaxListeners(0, this.stop.signal, this.cut.signal);
    this.evictor = new Evictor({
      resources: o.resources,
      clock: this.clock,
      ejectIdleMs: o.config.ejectIdleMs,
      log: this.log,
      candidates: () => this.evictable(),
      take: (c) => this.pools.get(c.spec.key)?.queue.remove(c) ?? false,
    });
    this.unsubscribe = o.changes?.subscribe((change) => this.changed(change)) ?? (() => undefined);
    const policy = o.keepAlive ?? keepAlivePolicy(o.config.keepAlivePolicy, { binMs: o.config.keepAliveBinMs });
    this.keeper = new Keeper(policy, this);
    if (policy instanceof HistogramKeepAlive && o.histograms) this.histograms = new HistogramPersistence(policy, o.histograms, this.clock, this.log);
  }

  /** Starts a container of `spec` ahead of demand (see SlotPool.prewarm); never rejects. */
  async prewarm(spec: FunctionSpec, keepMs: number): Promise<void> {
    if (this.closing) return;
    let pool = this.pools.get(spec.key);
    if (!pool) this.pools.set(spec.key, (pool = new SlotPool(spec, this)));
    await pool.prewarm(keepMs).catch((err: unknown) => this.log.warn({ err, fn: spec.fnId }, 'pre-warm failed'));
  }

  get stopping(): AbortSignal {
    return this.stop.signal;
  }

  get cutting(): AbortSignal {
    return this.cut.signal;
  }

  /**
   * Removes what earlier instances of this owner that are dead left behind
   * (their containers, their socket folders) and makes this process's
   * socket folder; must run before calls. Socket folders come first: they
   * need no engine, so a server started while the engine is down still
   * cleans them. Rejects when the engine does not answer.
   */
  async start(): Promise<void> {
    const { owner, instance, iofsPath: iofsRoot } = this.o.config;
    const isAlive = this.o.isInstanceAlive ?? instanceAlive;
    await this.histograms?.start();
    await claimSocketFolder(iofsRoot, instance);
    const swept = await sweepSocketFolders(iofsRoot, instance, isAlive);
    if (swept.removed > 0) this.log.info({ removed: swept.removed }, 'removed socket folders left by earlier instances that died');
    for (const f of swept.failed) this.log.warn({ folder: f.path, reason: f.reason }, 'could not remove the socket folder of an instance that died; remove it by hand');
    const others = new Map<string, boolean | undefined>();
    const removed = await this.o.driver.removeContainers({ [OWNER_LABEL]: owner }, (c) => {
      const of = c.labels[INSTANCE_LABEL] ?? '';
      if (of === instance) return false;
      if (!others.has(of)) others.set(of, of === '' ? false : isAlive(of));
      // Only a provably dead instance's containers go.
      return others.get(of) === false;
    });
    if (removed > 0) this.log.info({ removed }, 'removed containers left by an earlier instance');
    let othersLive = false;
    for (const [of, alive] of others) {
      if (alive === false) continue;
      othersLive = true;
      this.log.warn({ instance: of }, 'another fnts server (shown as host/pid/start) uses this data directory: its containers are left alone');
    }
    // Folders of earlier fnts versions (one per container, directly under
    // the root) say nothing of their instance: removed only when no other
    // server has containers here.
    if (!othersLive) await Promise.all(swept.unowned.map((path) => removeSocketTree(path).catch(() => undefined)));
  }

  /** Adds a listener of every call (see CallListener's rules) and, if it listens to them, of containers' states. */
  addListener(listener: CallListener & ContainerListener): void {
    if (listener.onCallStart || listener.onCallExec || listener.onCallEnd || listener.onCallLog) this.listeners.push(listener);
    if (listener.onContainerState || listener.onContainerRetired || listener.onPrewarm) this.containerListeners.push(listener);
  }

  /** A new container's (or launch's) states, told to the container listeners. */
  containerStates(id: string, spec: FunctionSpec): ContainerStates {
    return new ContainerStates({ id, appId: spec.appId, fnId: spec.fnId }, this.containerListeners, this.log);
  }

  // ---- PoolHost: what pools and calls use of the agent

  enter(): void {
    this.active++;
  }

  leave(): void {
    if (--this.active === 0) this.drained?.();
  }

  labels(spec: FunctionSpec): Record<string, string> {
    return {
      [OWNER_LABEL]: this.config.owner,
      [INSTANCE_LABEL]: this.config.instance,
      ...(this.config.containerTag ? { [TAG_LABEL]: this.config.containerTag } : {}),
      'fnts.app_id': spec.appId,
      'fnts.app_name': spec.appName,
      'fnts.fn_id': spec.fnId,
      'fnts.fn_name': spec.fnName,
    };
  }

  adopt(c: HotContainer): void {
    this.containers.add(c);
  }

  forget(c: HotContainer): void {
    this.containers.delete(c);
  }

  adoptCold(id: string, remove: () => Promise<void> | undefined): void {
    this.cold.set(id, remove);
  }

  forgetCold(id: string): void {
    this.cold.delete(id);
  }

  get spans(): CallSpans | undefined {
    return this.o.spans;
  }

  syncInFlight(): number {
    return this.syncCalls;
  }

  tryReserve(req: ResourceRequest): ResourceToken | null {
    const token = this.resources.tryReserve(req);
    if (!token) this.evictor.evict(req).catch((err: unknown) => this.log.error({ err }, 'eviction failed'));
    return token;
  }

  /**
   * Makes room for a call of `call`'s fn now if there is none: idle
   * containers of other fns go as for a launch that waits (not only those
   * idle far longer, as for a refusal). For a call that has waited at the
   * LB, on the runner the LB would have it run on.
   */
  makeRoom(call: Call): void {
    const { request } = functionSpec(call.fn, call.type);
    this.evictor.evict(request, true).catch((err: unknown) => this.log.error({ err }, 'eviction failed'));
  }

  /** How long until room could be made for a call of `call`'s fn here (see Evictor.roomIn); undefined: not from idle containers. */
  roomIn(call: Call): number | undefined {
    return this.evictor.roomIn(functionSpec(call.fn, call.type).request);
  }

  dropped(pool: SlotPool): void {
    if (this.pools.get(pool.key) === pool) this.pools.delete(pool.key);
  }

  // ---- calls

  /**
   * Runs `call` and answers with the function's response (see Invoker). A
   * `detached` call reserves from the async area, never the sync reserve.
   */
  invoke(call: Call, body: CallBody, bodyLength?: number): RunningCall {
    const handle = new CallHandle(call);
    handle.response = this.execute(handle, { call, body, bodyLength });
    return handle;
  }

  private async execute(handle: CallHandle, req: CallRequest): Promise<CallResponse> {
    if (this.closing) throw serverBusy();
    const spec = functionSpec(req.call.fn, req.call.type);
    if (!this.resources.isPossible(spec.request)) throw new ApiError(E.CallResourceTooBig);
    this.enter();
    this.calls.add(handle);
    const sync = req.call.type === 'sync';
    if (sync) this.syncCalls++;
    const span = this.o.spans?.begin(req.call);
    // The function gets the call with its own traceparent.
    if (span) req = { ...req, call: span.call };
    const trace = new CallTrace(req.call, {
      listeners: this.listeners,
      log: this.log,
      maxLogBytes: this.config.maxLogBytes,
      onEnd: () => {
        this.calls.delete(handle);
        if (sync) this.syncCalls--;
        this.leave();
      },
      span,
    });
    handle.trace = trace;
    const signal = handle.cancelled;
    if (spec.format === 'default') return runColdCall(this, spec, req, signal, trace);
    let pool = this.pools.get(spec.key);
    if (!pool) this.pools.set(spec.key, (pool = new SlotPool(spec, this)));
    // A call with this key shows the key is current (only, say, an annotation changed).
    pool.stale = false;
    return runHotCall(pool, req, signal, trace, this.config.statsIntervalMs);
  }

  /** Idle containers the evictor may take: not of a pool that is itself waiting to launch. */
  private *evictable(): Iterable<HotContainer> {
    for (const pool of this.pools.values()) {
      if (pool.isReserving) continue;
      yield* pool.queue.idleItems();
    }
  }

  // ---- changes and shutdown

  /**
   * A fn (or every fn of an app) changed or was deleted: its idle
   * containers leave service now, busy and starting ones as soon as they are
   * free (after serving any call of the old definition still waiting). New
   * calls get containers of the new definition, since its slot key differs.
   */
  private changed(change: ResourceChange): void {
    // A reset retires nothing: a changed fn's calls already go to containers of its new definition.
    if (change.kind === 'trigger' || change.kind === 'reset') return;
    const matches = (spec: FunctionSpec): boolean => (change.kind === 'fn' ? spec.fnId === change.id : spec.appId === change.id);
    for (const pool of this.pools.values()) if (matches(pool.spec)) pool.retireStale();
    this.keeper.changed(matches);
  }

  snapshot(): AgentSnapshot {
    return {
      containers: this.containers.size,
      cold: this.cold.size,
      queues: [...this.pools.values()].map((p) => ({ ...p.queue.stats(), fnId: p.spec.fnId })),
    };
  }

  /**
   * Cuts every call in progress now (they fail with 503 Service is shutting
   * down, their containers go) and every container start; close() then
   * completes without waiting for calls. For a bounded shutdown.
   */
  abort(): void {
    this.closing = true;
    this.stop.abort(shuttingDown());
    this.cut.abort(shuttingDown());
    for (const call of [...this.calls]) call.cancel('shutdown');
  }

  /**
   * Refuses new calls, fails those still waiting for a container (503), lets
   * running ones finish, then removes every container this process started,
   * those still starting included. Idempotent; abort() makes it quick.
   */
  close(): Promise<void> {
    this.closed ??= (async () => {
      this.closing = true;
      this.stop.abort(shuttingDown());
      this.unsubscribe();
      this.evictor.close();
      this.keeper.close();
      for (const pool of this.pools.values()) pool.close(serverBusy());
      if (this.active > 0) await new Promise<void>((resolve) => (this.drained = resolve));
      await Promise.all([...this.containers].map((c) => c.retire('shutdown', 'server shutting down')));
      await Promise.all([...this.cold.values()].map(async (remove) => remove()));
      // Whatever is left of this process's containers (one whose creation
      // raced the shutdown) goes too.
      await this.driver
        .removeContainers({ [OWNER_LABEL]: this.config.owner, [INSTANCE_LABEL]: this.config.instance })
        .catch((err: unknown) => this.log.warn({ err }, "could not list this server's containers to remove them"));
      await this.histograms?.close();
      await removeSocketTree(this.socketFolder).catch((err: unknown) => this.log.warn({ err, folder: this.socketFolder }, "could not remove this server's socket folder"));
      await this.driver.close();
    })();
    return this.closed;
  }
}
