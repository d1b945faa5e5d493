/**
 * The seam between the pool manager and whatever runs containers: a
 * ControlPlane starts runners for a group, lists them, and removes one.
 * Plugins (planes/): `docker` (containers on the local engine), `swarm` (a
 * service per group), `kubernetes` (a Deployment per group).
 *
 * Rules every plugin keeps (control-plane.contract.ts checks them):
 * - `runners(group)` lists every runner of the group the plane has, starting
 *   ones included (address undefined until the plane knows it); never
 *   another group's, never anything the plane did not make.
 * - `provision(group, n)` asks for n more runners and returns how many were
 *   asked for (n, or fewer when the plane caps it); the runners may appear
 *   in `runners()` later, not necessarily before it returns.
 * - `remove(group, id)` stops that runner gracefully (SIGTERM: it refuses new
 *   calls and finishes those in flight) and forgets it; removing a runner
 *   that is already gone is not an error. Only that runner goes.
 * - Failures throw ControlPlaneError saying what to check.
 * - `close()` releases the plane's connections (not its runners). Idempotent.
 */
import { RUNNER_GROUP_NAME } from '../models/index.js';

/** One runner as the control plane sees it. */
export interface RunnerInfo {
  /** The plane's id for it (a container, task or pod name): what `remove` takes. */
  readonly id: string;
  /** host:port of its RunnerProtocol, once known. */
  readonly address: string | undefined;
  /** When the plane created it (ms since the epoch): the group's membership is ordered by it. */
  readonly createdAt: number;
}

export interface ControlPlane {
  /** The plugin's name (docker, swarm, kubernetes), for logs and metrics. */
  readonly kind: string;
  runners(group: string): Promise<RunnerInfo[]>;
  provision(group: string, n: number): Promise<number>;
  remove(group: string, id: string): Promise<void>;
  close(): Promise<void>;
}

export class ControlPlaneError extends Error {
  override readonly name = 'ControlPlaneError';
  constructor(
    readonly code: 'unreachable' | 'refused' | 'invalid',
    message: string,
    options?: { cause?: unknown },
  ) {
    super(message, options);
  }
}

/** Group names become container, service and Deployment names: the app annotation's rule. */
export const GROUP_NAME = RUNNER_GROUP_NAME;

export function checkGroup(group: string): void {
  if (!GROUP_NAME.test(group)) {
    throw new ControlPlaneError('invalid', `runner group '${group}' is not a valid name; use up to 40 lower-case letters, digits and dashes (the app annotation that names it)`);
  }
}
