/**
 * A hot container: one container serving calls of one slot queue, one at a
 * time, over the FDK's unix socket (http-stream) or its stdin/stdout (the
 * http, json and cloudevent formats).
 *
 *   starting ──ready──▶ idle ⇄ busy
 *       │                │      │
 *       └─────fail───────┴──────┴──▶ retired (container removed, token and folder released)
 *
 * While idle it is frozen (paused) after FN_FREEZE_IDLE_MSECS, retired after
 * the time the keep-alive policy gives it (at most the fn's idle_timeout:
 * prewarm.ts), and may be evicted by the agent when another
 * function waits for memory. A container that exits, or whose call cannot be
 * trusted to have ended cleanly (timeout, broken exchange), is retired.
 * Every retirement names one of a few reasons (RetireReason): bounded
 * labels for metrics, with the detail apart.
 */
import { watch, type FSWatcher } from 'node:fs';
import { lstat } from 'node:fs/promises';
import { join } from 'node:path';
import { PassThrough } from 'node:stream';
import type { Cookie, Driver, RunResult, Stat } from '../drivers/index.js';
import { ApiError, E, FunctionError, tellEach } from '../models/index.js';
import { Deadline, within } from '../time/index.js';
import type { Clock, Timer } from './clock.js';
import type { ContainerState, ContainerStates, RetireReason } from './events.js';

export type { RetireReason } from './events.js';
import type { SocketDirs } from './iofs.js';
import { secretsMount, type AgentSecrets } from './secrets.js';
import { containerBase, type FunctionSpec } from './spec.js';
import type { CallRequest, Exchange } from './protocol/call.js';
import { ContainerConnection } from './protocol/http1.js';
import { httpStreamExchange } from './protocol/http-stream.js';
import { cloudEventExchange, JsonChannel, jsonExchange, stdioConnection, stdioHttpExchange } from './protocol/stdio.js';
import type { ResourceToken } from './resource.js';
import type { CallLog, ContainerOutput } from './logs.js';
import { startTimings, type StartLink, type StartTimings } from './trace.js';
import type { CallSpans } from './spans.js';
import type { Logger } from 'pino';

export type HotState = 'starting' | 'idle' | 'busy' | 'retired';

export interface HotContainerOptions {
  readonly id: string;
  readonly spec: FunctionSpec;
  /** Its lifecycle as the container listeners see it (begun in `wait` by the launch). */
  readonly states: ContainerStates;
  /** How long its launch waited for memory and CPU (for the trace of the call that waited for it). */
  readonly tokenMs: number;
  readonly driver: Driver;
  readonly token: ResourceToken;
  /** This container's folder on the host, mounted at /tmp/iofs (http-stream only). */
  readonly dir: string;
  /** Makes and removes `dir` (a size-capped tmpfs where the server can mount one). */
  readonly dirs: SocketDirs;
  /** Where the fn's secrets come from and how their folder is made (secrets.ts); undefined: containers get none. */
  readonly secrets?: AgentSecrets | undefined;
  /** This container's secrets folder on the host, when its fn has secrets (bound read-only at /run/secrets). */
  readonly secretsDir: string;
  readonly labels: Readonly<Record<string, string>>;
  /** Its stdout/stderr (stderr only, for the formats that answer on stdout), attributed to the call it serves. */
  readonly output: ContainerOutput;
  /** The agent's log, for what goes wrong while the container leaves service. */
  readonly log: Logger;
  readonly clock: Clock;
  readonly startTimeoutMs: number;
  readonly freezeIdleMs: number;
  /** The most bytes an answer may have; Infinity = no limit. */
  readonly responseLimit: number;
  /** Told when the container leaves service, whatever the reason. Must not throw. */
  readonly onRetired: (c: HotContainer, reason: RetireReason, detail: string) => void;
  /** Told when the idle timeout expires, to take the container out of its queue. */
  readonly onIdleTimeout: (c: HotContainer) => void;
  /** When tracing: the container's start becomes a span the calls that waited for it link to. */
  readonly spans?: CallSpans | undefined;
}

const LISTENER = 'lsnr.sock';

/** How long a broken exchange waits for the container's exit report, to say why it broke. */
const EXIT_REPORT_MS = 1500;

/** The container ended before its FDK was ready. */
function initFailed(r: RunResult): FunctionError {
  return new FunctionError(E.ContainerInitFail, { message: `${E.ContainerInitFail.message} (${r.message ?? 'container exited'})` });
}

export class HotContainer {
  readonly id: string;
  readonly spec: FunctionSpec;
  state: HotState = 'starting';
  /** The clock's time when it last became idle. */
  idleSince = 0;
  /** How long it may stay idle this time (the keep-alive policy's answer; at most the fn's idle_timeout). */
  private keepMs = 0;
  /** Started ahead of demand and not yet used by a call. */
  private prewarmed = false;
  calls = 0;
  private cookie: Cookie | undefined;
  /** HTTP framing over the socket (http-stream) or over stdio (http). */
  private client: ContainerConnection | undefined;
  /** JSON framing over stdio (json, cloudevent). */
  private json: JsonChannel | undefined;
  private frozen = false;
  /** The engine has paused it (frozen says a pause was asked for; this, that it happened). */
  private paused = false;
  /** Serialises pause/unpause so a thaw never overtakes a freeze in flight. */
  private freezeOps: Promise<void> = Promise.resolve();
  /** One timer for both idle clocks, re-armed lazily rather than per call. */
  private timer: Timer | undefined;
  private exit: RunResult | undefined;
  private startTimings: StartTimings | undefined;
  /** Its start's span (when traced) and when it became ready (performance.now()). */
  private launchLink: StartLink | undefined;
  private retiring: Promise<void> | undefined;
  /** Its secrets folder exists: removed when it retires. */
  private secretsMade = false;

  constructor(private readonly o: HotContainerOptions) {
    this.id = o.id;
    this.spec = o.spec;
  }

  get exitResult(): RunResult | undefined {
    return this.exit;
  }

  /**
   * Creates and starts the container and, for http-stream, waits for its FDK
   * to announce the socket (the stdio formats are ready once started).
   * Throws (and retires itself) on failure: the driver's errors
   * (ImageError, ContainerStartError, DriverError), ContainerInitFail when
   * the container exits first, ContainerInitTimeout when the socket does not appear within
   * FN_HOT_START_TIMEOUT_MSECS of the engine's start, or `signal`'s reason.
   *
   * Nothing is left pending on any path: the readiness wait (its watcher,
   * its timer) exists only while it is awaited, after the engine has
   * started the container.
   */
  async start(signal: AbortSignal): Promise<void> {
    const { spec, dir } = this.o;
    const socket = spec.format === 'http-stream';
    this.o.states.to('start');
    try {
      const secrets = await secretsMount(this.o.secrets, spec, this.o.secretsDir, this.o.log);
      if (secrets) {
        // Retired while they were read: retire() did not know of the folder.
        if (this.state === 'retired') await this.o.secrets!.folders.close(this.o.secretsDir);
        else this.secretsMade = true;
      }
      if (socket) await this.o.dirs.open(dir);
      // The stdio formats answer on stdout, so it is always taken; stderr is the log.
      const stdout = socket ? undefined : new PassThrough();
      this.stdout = stdout;
      const cookie = await this.o.driver.prepare(
        {
          ...containerBase(spec),
          id: this.id,
          env: spec.env,
          labels: this.o.labels,
          mounts: [...(socket ? [{ hostPath: dir, containerPath: '/tmp/iofs' }] : []), ...(secrets ? [secrets] : [])],
          stdin: !socket,
          logs: stdout ? this.o.output.answeringOn(stdout) : this.o.output,
        },
        signal,
      );
      this.cookie = cookie;
      // Retired while the engine was creating it: nobody else will remove it.
      if (this.state === 'retired') {
        await cookie.close();
        throw signal.aborted ? signal.reason : new FunctionError(E.ContainerInitFail);
      }
      const started = performance.now();
      await cookie.run(signal);
      // wait() never rejects (Driver contract).
      void cookie.wait().then((r) => this.onExit(r));
      if (socket) await this.listenerReady(join(dir, LISTENER), signal);
      const ready = performance.now();
      this.startTimings = startTimings(cookie.timings, ready - started, this.o.tokenMs);
      const context = this.o.spans?.containerStart({ id: this.id, appId: spec.appId, fnId: spec.fnId }, this.startTimings, performance.timeOrigin + ready);
      if (context) this.launchLink = { context, readyAt: ready };
      if (socket) {
        this.client = ContainerConnection.unix(join(dir, LISTENER));
      } else if (spec.format === 'http') {
        this.client = stdioConnection(cookie.stdin!, stdout!);
      } else {
        this.json = new JsonChannel(cookie.stdin!, stdout!);
      }
    } catch (err) {
      await this.retire(signal.aborted ? 'shutdown' : 'failed', `start failed: ${err instanceof Error ? err.message : String(err)}`);
      throw err;
    }
  }

  /**
   * Resolves when the FDK's socket link appears; rejects when the container
   * exits first, the start times out, or `signal` aborts. Its watcher, timer
   * and listeners are released on every one of those paths.
   */
  private listenerReady(path: string, signal: AbortSignal): Promise<void> {
    return new Promise<void>((resolve, reject) => {
      let watcher: FSWatcher | undefined;
      let done = false;
      const finish = (err?: unknown): void => {
        if (done) return;
        done = true;
        timeout.clear();
        watcher?.close();
        signal.removeEventListener('abort', onAbort);
        this.exitedBeforeReady = undefined;
        if (err) reject(err);
        else resolve();
      };
      const onAbort = (): void => finish(signal.reason);
      const check = (): void => {
        lstat(path).then(
          () => finish(),
          () => undefined,
        );
      };
      const timeout = new Deadline(this.o.startTimeoutMs, () => finish(new FunctionError(E.ContainerInitTimeout)));
      if (signal.aborted) return onAbort();
      signal.addEventListener('abort', onAbort, { once: true });
      const exited = this.exit;
      if (exited) return finish(initFailed(exited));
      this.exitedBeforeReady = (r: RunResult) => finish(initFailed(r));
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
    });
  }

  private exitedBeforeReady: ((r: RunResult) => void) | undefined;
  /** The stdio formats' answer channel: ends when the container does. */
  private stdout: PassThrough | undefined;

  private onExit(result: RunResult): void {
    this.exit = result;
    // A call in flight on stdio learns that no answer will come.
    this.stdout?.end();
    this.exitedBeforeReady?.(result);
    if (this.state !== 'retired') void this.retire('failed', `container exited: ${result.message ?? result.status}`);
  }

  /**
   * Marks the container idle for at most `keepMs` (default and upper bound:
   * the fn's idle_timeout): the freeze and idle-timeout clocks start.
   */
  markIdle(keepMs = this.spec.idleTimeoutMs): void {
    if (this.state === 'retired') return;
    this.state = 'idle';
    this.o.states.to(this.idleState());
    this.idleSince = this.o.clock.now();
    this.keepMs = Math.min(keepMs, this.spec.idleTimeoutMs);
    this.arm();
  }

  /** What the metrics call it while idle. */
  private idleState(): ContainerState {
    return this.prewarmed ? 'prewarmed' : this.frozen ? 'paused' : 'idle';
  }

  /**
   * It was started ahead of demand: until a call takes it (takePrewarmed)
   * it is `prewarmed`, and the first call it serves waited for no start.
   */
  markPrewarmed(): void {
    this.prewarmed = true;
    this.startTimings = undefined;
  }

  get isPrewarmed(): boolean {
    return this.prewarmed;
  }

  /** True once, for the call that takes it while it is pre-warmed (told as a pre-warm used). */
  takePrewarmed(): boolean {
    if (!this.prewarmed) return false;
    this.prewarmed = false;
    this.o.states.prewarm('used');
    return true;
  }

  /**
   * Arms the idle timer for the next thing due (freeze, then idle timeout)
   * unless one is pending: a pending timer that fires early finds out and
   * re-arms. Busy containers stay busy through it.
   */
  private arm(): void {
    if (this.timer || this.state !== 'idle') return;
    const freezeAt = this.frozen || !Number.isFinite(this.o.freezeIdleMs) ? Infinity : this.idleSince + this.o.freezeIdleMs;
    const expireAt = this.idleSince + this.keepMs;
    const due = Math.min(freezeAt, expireAt);
    this.timer = this.o.clock.setTimeout(() => this.onTimer(), Math.max(0, due - this.o.clock.now()));
  }

  private onTimer(): void {
    this.timer = undefined;
    if (this.state !== 'idle') return;
    const idleFor = this.o.clock.now() - this.idleSince;
    if (idleFor >= this.keepMs) {
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
    this.o.states.to('busy');
    if (!this.frozen) return undefined;
    this.frozen = false;
    const cookie = this.cookie!;
    // Only a pause that happened is undone: one that failed (the engine
    // refused it) left the container running, and unpausing it would fail the call.
    this.freezeOps = this.freezeOps.then(() => {
      if (!this.paused) return undefined;
      this.paused = false;
      return cookie.unfreeze();
    });
    return this.freezeOps;
  }

  private freeze(): void {
    if (this.state !== 'idle' || this.frozen || !this.cookie) return;
    this.frozen = true;
    this.o.states.to(this.idleState());
    const cookie = this.cookie;
    this.freezeOps = this.freezeOps
      .then(() => cookie.freeze())
      .then(() => {
        this.paused = true;
      })
      .catch(() => {
        // A container that cannot be paused still works; remember it is not frozen.
        this.frozen = false;
        if (this.state === 'idle') this.o.states.to(this.idleState());
      });
  }

  get isFrozen(): boolean {
    return this.frozen;
  }

  /**
   * Starts one call; the caller cancels it on a timeout or when its client
   * leaves. A failed exchange is explained by explain(). What the container
   * writes from now until endCall() belongs to this call (`log`, when kept).
   */
  exec(req: CallRequest, deadline: Date, log: CallLog | undefined): Exchange {
    if (this.state !== 'busy') throw new ApiError(E.FunctionResponse, { message: 'container is not available' });
    this.calls++;
    this.o.output.begin(req.call.id, log);
    const opts = { deadline, responseLimit: this.o.responseLimit };
    switch (this.spec.format) {
      case 'http-stream':
        return httpStreamExchange(this.client!, req, opts);
      case 'http':
        return stdioHttpExchange(this.client!, req, opts);
      case 'json':
        return jsonExchange(this.json!, req, opts);
      case 'cloudevent':
        return cloudEventExchange(this.json!, req, opts);
      default:
        throw new ApiError(E.FunctionResponse, { message: `format ${this.spec.format} is not served by hot containers` });
    }
  }

  /** The call is over: output from now on belongs to no call. */
  endCall(): void {
    this.o.output.end();
  }

  /** Its start's span, for the calls that waited while it started (undefined when not traced). */
  get startLink(): StartLink | undefined {
    return this.launchLink;
  }

  /** How this container's start went, told once: to the first call it serves. */
  takeStartTimings(): StartTimings | undefined {
    const t = this.startTimings;
    this.startTimings = undefined;
    return t;
  }

  /** Samples the container's resource use until the returned function is called. */
  watchStats(onStat: (stat: Stat) => void, intervalMs: number): () => void {
    return this.cookie?.watchStats(onStat, intervalMs) ?? (() => undefined);
  }

  /** The container's stream cannot be trusted with another call (output nobody asked for). */
  get spent(): boolean {
    return this.json?.spent ?? false;
  }

  /**
   * Turns an exchange failure into the answer the caller gets: if the
   * container died, say how (out of memory, exit code) rather than only that
   * the exchange broke.
   */
  async explain(err: unknown): Promise<unknown> {
    if (ApiError.is(err, E.FunctionResponse) && this.cookie) {
      // A dying container's exit is reported within moments of its broken
      // exchange, once its last output is delivered (the driver allows that
      // a second): an answer naming the cause is worth that wait on this
      // failure path.
      const result = this.exit ?? (await within(this.cookie.wait(), EXIT_REPORT_MS, () => undefined));
      if (result && result.status !== 'success') {
        return new FunctionError(E.FunctionFailed, { message: `${E.FunctionFailed.message}: ${result.message ?? result.status}`, cause: err });
      }
    }
    return err;
  }

  /**
   * Takes the container out of service for good: closes the connection,
   * removes the container, returns its resources, deletes its folders.
   * Idempotent; resolves once the container is gone; never rejects.
   */
  retire(reason: RetireReason, detail: string = reason): Promise<void> {
    this.retiring ??= (async () => {
      if (this.prewarmed) {
        this.prewarmed = false;
        this.o.states.prewarm('wasted');
      }
      // Retired before it ever started (a failed start): not a retirement to count.
      this.o.states.end(this.o.states.current === 'start' ? undefined : reason);
      this.state = 'retired';
      this.timer?.clear();
      this.timer = undefined;
      tellEach([this.o.onRetired], (onRetired) => onRetired(this, reason, detail), this.o.log, 'a retire listener', { container: this.id });
      const client = this.client;
      this.client = undefined;
      client?.destroy();
      await this.cookie?.close();
      // The engine has delivered the container's last output.
      this.o.output.finish();
      this.o.token.close();
      if (this.spec.format === 'http-stream') await this.o.dirs.close(this.o.dir);
      if (this.secretsMade) await this.o.secrets?.folders.close(this.o.secretsDir);
    })();
    return this.retiring;
  }
}
