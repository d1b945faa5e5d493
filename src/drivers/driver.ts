/**
 * The container driver contract (after Fn's api/runner/drivers/driver.go).
 * A Driver turns a ContainerSpec into a prepared container (a Cookie); the
 * Cookie runs, freezes and removes it. Drivers know containers, never calls.
 *
 * Rules every implementation MUST keep (driver.contract.ts pins them; run
 * it on any new driver):
 * - prepare() leaves nothing behind when it fails: no container, no pulled
 *   partial state the next prepare() would trip over.
 * - wait() never rejects: however the container ends, it resolves with a
 *   RunResult saying how, and the first ending is the one it reports (a
 *   close() after the exit does not change it).
 * - close() removes the container whatever its state (created, running,
 *   frozen, exited) and is idempotent, concurrent calls included; after
 *   close(), wait() resolves.
 * - run()'s signal governs the start only; once run() has resolved, the
 *   driver holds no listener on it and its abort changes nothing.
 * - A container's stdout/stderr go to the spec's sinks, if any, each to its
 *   own, until it exits; wait() resolves only once all of it has been
 *   delivered.
 */
import type { Writable } from 'node:stream';

/**
 * A host folder seen inside the container at `containerPath`, read-write
 * unless `readOnly`: what the container's processes create there (the FDK's
 * socket) appears in the host folder, and the other way round.
 */
export interface Mount {
  readonly hostPath: string;
  readonly containerPath: string;
  readonly readOnly?: boolean;
}

export interface ContainerSpec {
  /** fnts's id for the container; names it. */
  readonly id: string;
  readonly image: string;
  readonly env: Readonly<Record<string, string>>;
  /** Hard memory limit, bytes; swap is limited to the same. */
  readonly memoryBytes: number;
  /** CPU quota in milli-CPUs; 0 for none. */
  readonly cpuMillis: number;
  /**
   * The container carries them from prepare() until it is removed:
   * listContainers() and removeContainers() find it by them.
   */
  readonly labels: Readonly<Record<string, string>>;
  readonly mounts: readonly Mount[];
  /** Size of the writable /tmp, bytes. */
  readonly tmpfsBytes: number;
  /**
   * Attach stdin: the cookie's `stdin` stream feeds the container. Without
   * it the container's stdin is empty.
   */
  readonly stdin?: boolean;
  /**
   * Where the container's stdout and stderr go; without sinks the output is
   * discarded by the engine (nothing to stream, nothing stored).
   */
  readonly logs?: { readonly stdout: Writable; readonly stderr: Writable } | undefined;
}

/** A container as a listing shows it. */
export interface ContainerInfo {
  /** The engine's id. */
  readonly id: string;
  /** The ContainerSpec's id (the name the driver gave it), or '' for a container not named by a driver. */
  readonly specId: string;
  readonly labels: Readonly<Record<string, string>>;
}

/**
 * How a container ended:
 * - 'success': it exited with code 0;
 * - 'error': it exited with another code;
 * - 'killed': the kernel killed it for its memory (`oomKilled`), or close()
 *   removed it (before it ran, too);
 * - 'timeout' / 'cancelled': run()'s signal aborted while it started, with a
 *   TimeoutError reason / any other.
 */
export type RunStatus = 'success' | 'error' | 'timeout' | 'killed' | 'cancelled';

/**
 * One sample of a container's resource use (Fn's Stat): metric names are
 * net_rx, net_tx, mem_limit, mem_usage, disk_read, disk_write, cpu_user,
 * cpu_total, cpu_kernel (bytes, and nanoseconds of CPU).
 */
export interface Stat {
  /** Milliseconds since the epoch. */
  readonly timestamp: number;
  readonly metrics: Readonly<Record<string, number>>;
}

/** How long preparing took: making the image available, creating the container. */
export interface PrepareTimings {
  readonly imageMs: number;
  readonly createMs: number;
}

export interface RunResult {
  readonly status: RunStatus;
  /** The process's exit code; undefined when it never ran or the engine cannot tell. */
  readonly exitCode: number | undefined;
  /** The kernel killed it for exceeding its memory limit (status 'killed'). */
  readonly oomKilled: boolean;
  /**
   * Why it did not succeed, in words for the user ("container exited with
   * code 3", "container out of memory (limit 128 MB)"); undefined on success.
   */
  readonly message: string | undefined;
}

export interface Cookie {
  /** The engine's id for the container. */
  readonly id: string;
  /**
   * With `spec.stdin`, a stream into the container's stdin; otherwise null.
   * Written after run(), each write reaches the process as it is made, and
   * the stream stays open between writes (the stdio formats hold a
   * conversation over it); ending it is the process's end of input (a cold
   * call's whole body). Writes after the process is gone may fail: give it
   * an 'error' listener.
   */
  readonly stdin: Writable | null;
  /**
   * Starts the container; resolves once the engine has started it.
   *
   * `signal` governs the start, not the container's life:
   * - already aborted: rejects with its reason and starts nothing;
   * - aborted before run() resolves: the container is killed, run() rejects
   *   with the reason, and wait() says 'timeout' when the reason is a
   *   TimeoutError, else 'cancelled';
   * - once run() has resolved the driver holds no listener on it, and an
   *   abort changes nothing: a server's long-lived stop signal neither
   *   collects a listener per container nor cuts the calls a stopping
   *   server lets finish. close() is how a running container is stopped.
   *
   * Throws ContainerStartError when the engine refuses to start this
   * container (bad entrypoint, bad environment), DriverError when the engine
   * itself fails. On every failure the container is still there for close().
   */
  run(signal?: AbortSignal): Promise<void>;
  /**
   * Resolves once the container has ended and its output is delivered, with
   * how it ended (see RunStatus). Never rejects. May be called before run():
   * it then reports the run, or the close() of a container that never ran.
   * Every call gets the same result.
   */
  wait(): Promise<RunResult>;
  /**
   * Samples the container's resource use until the returned function is
   * called: `onStat` gets a reading at most every `intervalMs` (the engine
   * may publish less often), whose `mem_limit` is the spec's memoryBytes.
   * Never throws; a container that goes away (or is gone already) just
   * stops the readings.
   */
  watchStats(onStat: (stat: Stat) => void, intervalMs: number): () => void;
  readonly timings: PrepareTimings;
  /**
   * Pauses every process in the container; unfreeze() resumes them where
   * they were, stdin and output streams intact. A frozen container still
   * closes. Both throw DriverError when the engine fails.
   */
  freeze(): Promise<void>;
  unfreeze(): Promise<void>;
  /**
   * Kills and removes the container, whatever its state; once it resolves
   * the container is no longer listed. Idempotent, concurrent calls
   * included; never rejects. A container removed by other means
   * (removeContainers) still closes.
   */
  close(): Promise<void>;
}

export interface Driver {
  /**
   * Makes the image available (pulling it within `pullTimeoutMs` when absent)
   * and creates the container, not started. Throws ImageError when the image
   * cannot be had, DriverError for other engine failures and once the
   * driver is closed; rejects with `signal`'s reason when it aborts. On every
   * failure no container is left.
   */
  prepare(spec: ContainerSpec, signal?: AbortSignal): Promise<Cookie>;
  /** The containers (in any state) carrying all of `labels`; each with its cookie's id. */
  listContainers(labels: Readonly<Record<string, string>>): Promise<ContainerInfo[]>;
  /**
   * Removes the containers carrying all of `labels`, or only those of them
   * for which `which` says so; returns how many. A container already gone
   * counts as removed.
   */
  removeContainers(labels: Readonly<Record<string, string>>, which?: (c: ContainerInfo) => boolean): Promise<number>;
  /**
   * Resolves once the engine answers its cheapest request: what a readiness
   * probe asks before sending calls here. Throws DriverError saying why when
   * the engine does not answer, or once the driver is closed; rejects with
   * `signal`'s reason when it aborts first (the request is abandoned, so a
   * hung engine does not hold the prober). Creates nothing.
   */
  ping(signal?: AbortSignal): Promise<void>;
  /**
   * Releases the driver's own resources; prepare() then throws DriverError.
   * Containers are not removed (close their cookies first). Idempotent.
   */
  close(): Promise<void>;
}

/**
 * Down-samples `stats` (sorted by time) to at most `max` points by averaging
 * the samples in equal time windows (as Fn's drivers.Decimate): a long call
 * keeps its shape without keeping every sample. The last window takes the
 * rest.
 */
export function decimate(max: number, stats: readonly Stat[]): Stat[] {
  if (stats.length <= max) return [...stats];
  if (max <= 0) return [];
  const start = stats[0]!.timestamp;
  const window = (stats[stats.length - 1]!.timestamp - start) / max;
  const out: Stat[] = [];
  let i = 0;
  for (let bin = 0; bin < max && i < stats.length; bin++) {
    const last = bin === max - 1;
    const end = start + window * (bin + 1);
    const group: Stat[] = [];
    while (i < stats.length && (last || stats[i]!.timestamp <= end)) group.push(stats[i++]!);
    if (group.length > 0) out.push(average(group));
  }
  return out;
}

function average(group: readonly Stat[]): Stat {
  const metrics: Record<string, number> = {};
  for (const s of group) for (const [k, v] of Object.entries(s.metrics)) metrics[k] = (metrics[k] ?? 0) + v;
  for (const k of Object.keys(metrics)) metrics[k] = Math.round(metrics[k]! / group.length);
  return { timestamp: Math.round(group.reduce((t, s) => t + s.timestamp, 0) / group.length), metrics };
}

/** The engine failed (not the function). */
export class DriverError extends Error {
  override readonly name: string = 'DriverError';
}

/**
 * The engine refused to start the container for what it is: an entrypoint
 * that does not exist, an environment it cannot pass, and the like. The
 * function's image or config is at fault, not the engine.
 */
export class ContainerStartError extends DriverError {
  override readonly name = 'ContainerStartError';
}

/** The image is missing, cannot be pulled, or its pull timed out. */
export class ImageError extends DriverError {
  override readonly name = 'ImageError';
  constructor(
    readonly image: string,
    message: string,
    readonly timedOut = false,
    options?: { cause?: unknown },
  ) {
    super(message, options);
  }
}
