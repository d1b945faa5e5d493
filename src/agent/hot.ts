/**
 * A hot container: one container serving calls of one slot queue, one at a
 * time, over the FDK's unix socket.
 *
 *   starting ──ready──▶ idle ⇄ busy
 *       │                │      │
 *       └─────fail───────┴──────┴──▶ retired (container removed, token and folder released)
 *
 * While idle it is frozen (paused) after FN_FREEZE_IDLE_MSECS, retired after
 * the fn's idle_timeout, and may be evicted by the agent when another
 * function waits for memory. A container that exits, or whose call cannot be
 * trusted to have ended cleanly (timeout, broken exchange), is retired.
 */
import { watch, type FSWatcher } from 'node:fs';
import { chmod, lstat, mkdir, rm } from 'node:fs/promises';
import { join } from 'node:path';
import type { Cookie, Driver, RunResult } from '../drivers/index.js';
import { ApiError, E, FunctionError } from '../models/index.js';
import type { FunctionSpec } from './call.js';
import { ContainerConnection } from './protocol/http1.js';
import { exchange, type CallRequest, type Exchange } from './protocol/http-stream.js';
import type { ResourceToken } from './resource.js';
import type { LogSink } from './logs.js';

export type HotState = 'starting' | 'idle' | 'busy' | 'retired';

export interface HotContainerOptions {
  readonly id: string;
  readonly spec: FunctionSpec;
  readonly driver: Driver;
  readonly token: ResourceToken;
  /** This container's folder on the host, mounted at /tmp/iofs. */
  readonly dir: string;
  readonly labels: Readonly<Record<string, string>>;
  readonly logs: LogSink | undefined;
  readonly startTimeoutMs: number;
  readonly freezeIdleMs: number;
  readonly maxResponseBytes: number;
  /** Told when the container leaves service, whatever the reason. */
  readonly onRetired: (c: HotContainer, reason: string) => void;
  /** Told when the idle timeout expires, to take the container out of its queue. */
  readonly onIdleTimeout: (c: HotContainer) => void;
}

const LISTENER = 'lsnr.sock';

export class HotContainer {
  readonly id: string;
  readonly spec: FunctionSpec;
  state: HotState = 'starting';
  /** performance.now() when it last became idle. */
  idleSince = 0;
  calls = 0;
  private cookie: Cookie | undefined;
  private client: ContainerConnection | undefined;
  private frozen = false;
  /** Serialises pause/unpause so a thaw never overtakes a freeze in flight. */
  private freezeOps: Promise<void> = Promise.resolve();
  /** One timer for both idle clocks, re-armed lazily rather than per call. */
  private timer: NodeJS.Timeout | undefined;
  private exit: RunResult | undefined;
  private retiring: Promise<void> | undefined;

  constructor(private readonly o: HotContainerOptions) {
    this.id = o.id;
    this.spec = o.spec;
  }

  get exitResult(): RunResult | undefined {
    return this.exit;
  }

  /**
   * Creates and starts the container and waits for its FDK to announce the
   * socket. Throws (and retires itself) on failure: ImageError from the
   * driver, ContainerInitFail when it exits first, ContainerInitTimeout.
   */
  async start(): Promise<void> {
    const { spec, dir } = { spec: this.o.spec, dir: this.o.dir };
    try {
      await mkdir(dir, { recursive: true });
      // The function runs as an unprivileged user and must create its socket here.
      await chmod(dir, 0o777);
      this.cookie = await this.o.driver.prepare({
        id: this.id,
        image: spec.image,
        env: spec.env,
        memoryBytes: spec.memoryMB * 1024 * 1024,
        cpuMillis: spec.cpuMillis,
        labels: this.o.labels,
        mounts: [{ hostPath: dir, containerPath: '/tmp/iofs' }],
        tmpfsBytes: Math.max(spec.memoryMB, 16) * 1024 * 1024,
        logs: this.o.logs,
      });
      const ready = this.waitForListener(join(dir, LISTENER));
      await this.cookie.run();
      void this.cookie.wait().then((r) => this.onExit(r));
      await ready;
      this.client = ContainerConnection.unix(join(dir, LISTENER));
    } catch (err) {
      await this.retire(`start failed: ${err instanceof Error ? err.message : String(err)}`);
      throw err;
    }
  }

  /** Resolves when the FDK's socket link appears; rejects if the container exits or the start times out. */
  private waitForListener(path: string): Promise<void> {
    return new Promise<void>((resolve, reject) => {
      let watcher: FSWatcher | undefined;
      let done = false;
      const finish = (err?: unknown): void => {
        if (done) return;
        done = true;
        clearTimeout(timer);
        watcher?.close();
        if (err) reject(err);
        else resolve();
      };
      const check = (): void => {
        lstat(path).then(
          () => finish(),
          () => undefined,
        );
      };
      const timer = setTimeout(() => finish(new FunctionError(E.ContainerInitTimeout)), this.o.startTimeoutMs);
      try {
        watcher = watch(this.o.dir, (_event, name) => {
          if (name === LISTENER) check();
        });
        watcher.on('error', () => undefined);
      } catch (err) {
        finish(err);
        return;
      }
      // The link may already be there before the watch began.
      check();
      this.exitedBeforeReady = (r: RunResult) =>
        finish(new FunctionError(E.ContainerInitFail, { message: `${E.ContainerInitFail.message} (${r.message ?? 'container exited'})` }));
    });
  }

  private exitedBeforeReady: ((r: RunResult) => void) | undefined;

  private onExit(result: RunResult): void {
    this.exit = result;
    this.exitedBeforeReady?.(result);
    if (this.state !== 'retired') void this.retire(`container exited: ${result.message ?? result.status}`);
  }

  /** Marks the container idle: the freeze and idle-timeout clocks start. */
  markIdle(): void {
    if (this.state === 'retired') return;
    this.state = 'idle';
    this.idleSince = performance.now();
    this.arm();
  }

  /**
   * Arms the idle timer for the next thing due (freeze, then idle timeout)
   * unless one is pending: a pending timer that fires early finds out and
   * re-arms. Busy containers stay busy through it.
   */
  private arm(): void {
    if (this.timer || this.state !== 'idle') return;
    const freezeAt = this.frozen || !Number.isFinite(this.o.freezeIdleMs) ? Infinity : this.idleSince + this.o.freezeIdleMs;
    const expireAt = this.idleSince + this.spec.idleTimeoutMs;
    const due = Math.min(freezeAt, expireAt);
    this.timer = setTimeout(() => this.onTimer(), Math.max(0, due - performance.now()));
    this.timer.unref();
  }

  private onTimer(): void {
    this.timer = undefined;
    if (this.state !== 'idle') return;
    const idleFor = performance.now() - this.idleSince;
    if (idleFor >= this.spec.idleTimeoutMs) {
      this.o.onIdleTimeout(this);
      return;
    }
    if (idleFor >= this.o.freezeIdleMs) this.freeze();
    this.arm();
  }

  /**
   * Takes the container out of idleness for a call. Returns a promise only
   * when the container must be thawed first (no promise per call otherwise).
   */
  claim(): Promise<void> | undefined {
    this.state = 'busy';
    if (!this.frozen) return undefined;
    this.frozen = false;
    const cookie = this.cookie!;
    this.freezeOps = this.freezeOps.then(() => cookie.unfreeze());
    return this.freezeOps;
  }

  private freeze(): void {
    if (this.state !== 'idle' || this.frozen || !this.cookie) return;
    this.frozen = true;
    const cookie = this.cookie;
    this.freezeOps = this.freezeOps
      .then(() => cookie.freeze())
      .catch(() => {
        // A container that cannot be paused still works; remember it is not frozen.
        this.frozen = false;
      });
  }

  get isFrozen(): boolean {
    return this.frozen;
  }

  /**
   * Starts one call; the caller cancels it on a timeout or when its client
   * leaves. A failed exchange is explained by explain().
   */
  exec(req: CallRequest, deadline: Date): Exchange {
    if (this.state !== 'busy' || !this.client) throw new ApiError(E.FunctionResponse, { message: 'container is not available' });
    this.calls++;
    return exchange(this.client, req, { deadline, maxResponseBytes: this.o.maxResponseBytes });
  }

  /**
   * Turns an exchange failure into the answer the caller gets: if the
   * container died, say how (out of memory, exit code) rather than only that
   * the exchange broke.
   */
  async explain(err: unknown): Promise<unknown> {
    if (ApiError.is(err, E.FunctionResponse) && this.cookie) {
      const result = this.exit ?? (await Promise.race([this.cookie.wait(), new Promise<undefined>((r) => setTimeout(() => r(undefined), 250))]));
      if (result && result.status !== 'success') {
        return new FunctionError(E.FunctionFailed, { message: `${E.FunctionFailed.message}: ${result.message ?? result.status}`, cause: err });
      }
    }
    return err;
  }

  /**
   * Takes the container out of service for good: closes the connection,
   * removes the container, returns its resources, deletes its folder.
   * Idempotent; resolves once the container is gone.
   */
  retire(reason: string): Promise<void> {
    this.retiring ??= (async () => {
      this.state = 'retired';
      clearTimeout(this.timer);
      this.o.onRetired(this, reason);
      const client = this.client;
      this.client = undefined;
      client?.destroy();
      await this.cookie?.close();
      this.o.token.close();
      await rm(this.o.dir, { recursive: true, force: true }).catch(() => undefined);
    })();
    return this.retiring;
  }
}
