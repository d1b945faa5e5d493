/**
 * The container driver contract (seed 004). A Driver turns a ContainerSpec
 * into a prepared container (a Cookie); the Cookie runs, freezes and removes
 * it. Drivers know containers, never calls.
 *
 * Rules every implementation MUST keep:
 * - prepare() leaves nothing behind when it fails: no container, no pulled
 *   partial state the next prepare() would trip over.
 * - wait() never rejects: however the container ends, it resolves with a
 *   RunResult saying how.
 * - close() removes the container whatever its state (created, running,
 *   frozen, exited) and is idempotent; after close(), wait() resolves.
 * - A container's stdout/stderr go to the spec's sinks, if any, until it exits.
 */
import type { Writable } from 'node:stream';

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
  readonly labels: Readonly<Record<string, string>>;
  readonly mounts: readonly Mount[];
  /** Size of the writable /tmp, bytes. */
  readonly tmpfsBytes: number;
  /** Attach stdin: the cookie's `stdin` stream feeds the container. */
  readonly stdin?: boolean;
  /**
   * Where the container's stdout and stderr go; without sinks the output is
   * discarded by the engine (nothing to stream, nothing stored).
   */
  readonly logs?: { readonly stdout: Writable; readonly stderr: Writable } | undefined;
}

export type RunStatus = 'success' | 'error' | 'timeout' | 'killed' | 'cancelled';

export interface RunResult {
  readonly status: RunStatus;
  readonly exitCode: number | undefined;
  /** The kernel killed it for exceeding its memory limit. */
  readonly oomKilled: boolean;
  /** Why it did not succeed, in words for the user. */
  readonly message: string | undefined;
}

export interface Cookie {
  /** The engine's id for the container. */
  readonly id: string;
  /** With `spec.stdin`, a stream into the container's stdin; otherwise null. */
  readonly stdin: Writable | null;
  /**
   * Starts the container. An aborted signal kills it; its RunResult then
   * says 'timeout' when the abort reason is a TimeoutError, else 'cancelled'.
   */
  run(signal?: AbortSignal): Promise<void>;
  /** Resolves once the container has exited. Never rejects. */
  wait(): Promise<RunResult>;
  /** Pauses every process in the container. */
  freeze(): Promise<void>;
  unfreeze(): Promise<void>;
  /** Kills and removes the container. Idempotent; never rejects. */
  close(): Promise<void>;
}

export interface Driver {
  /**
   * Makes the image available (pulling it within `pullTimeoutMs` when absent)
   * and creates the container, not started. Throws ImageError when the image
   * cannot be had, DriverError for other engine failures.
   */
  prepare(spec: ContainerSpec, signal?: AbortSignal): Promise<Cookie>;
  /** Removes every container carrying all of `labels`; returns how many. */
  removeContainers(labels: Readonly<Record<string, string>>): Promise<number>;
  /** Releases the driver's own resources. Idempotent. */
  close(): Promise<void>;
}

/** The engine failed (not the function). */
export class DriverError extends Error {
  override readonly name: string = 'DriverError';
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

export interface ImageRef {
  /** '' for Docker Hub. */
  readonly registry: string;
  /** e.g. library/node, fnproject/hello, team/sub/fn */
  readonly repository: string;
  /** 'latest' when none was given; '' when a digest pins the image. */
  readonly tag: string;
  readonly digest: string;
}

/**
 * Parses an image reference the way seed 004's ParseImage does, and the way
 * Docker resolves one: the first component is a registry when it has a '.'
 * or a ':' or is 'localhost'; single-component Hub images live in
 * 'library/'; no tag means 'latest'.
 */
export function parseImage(ref: string): ImageRef {
  let rest = ref.trim();
  let digest = '';
  const at = rest.indexOf('@');
  if (at >= 0) {
    digest = rest.slice(at + 1);
    rest = rest.slice(0, at);
  }
  let tag = '';
  const colon = rest.lastIndexOf(':');
  if (colon > rest.lastIndexOf('/')) {
    tag = rest.slice(colon + 1);
    rest = rest.slice(0, colon);
  }
  const parts = rest.split('/');
  let registry = '';
  const first = parts[0] ?? '';
  if (parts.length > 1 && (first.includes('.') || first.includes(':') || first === 'localhost')) {
    registry = first;
    parts.shift();
  }
  let repository = parts.join('/');
  if (registry === '' && parts.length === 1) repository = `library/${repository}`;
  if (tag === '' && digest === '') tag = 'latest';
  return { registry, repository, tag, digest };
}
