/**
 * The `docker` control plane: each runner is a container of the fnts image
 * on the local engine, in the pure-runner role, its RunnerProtocol port
 * (9190) published on `publishHost` at a port the engine picks.
 *
 * A runner starts its functions' containers beside itself, on the same
 * engine, through the engine's socket mounted into it. Its functions talk
 * to it over unix sockets in a folder (FN_IOFS_PATH) that the engine mounts
 * into each function container by its host path, so the runner must see
 * the folder at that same path: `iofsRoot` is bind-mounted at its own
 * absolute path, and each runner works in `<iofsRoot>/<its name>` (a runner
 * clears its folder when it starts: two runners never share one).
 *
 * Runners are labelled with their group and the manager's name; only those
 * are listed and removed, whatever else runs on the engine.
 */
import { mkdir, rm } from 'node:fs/promises';
import { join } from 'node:path';
import { randomBytes } from 'node:crypto';
import Docker from 'dockerode';
import { INSTANCE_LABEL } from '../../agent/index.js';
import { checkGroup, ControlPlaneError, type ControlPlane, type RunnerInfo } from '../control-plane.js';

/** Labels on every runner container. */
export const GROUP_LABEL = 'fnts.pool.group';
export const MANAGER_LABEL = 'fnts.pool.manager';

/** The runner's RunnerProtocol port inside its container. */
export const RUNNER_GRPC_PORT = 9190;

export interface DockerPlaneOptions {
  /** The engine; default: /var/run/docker.sock. */
  readonly docker?: Docker;
  /** The fnts image (npm run image:runner). */
  readonly image: string;
  /** The manager's name: its runners carry it, and a restarted manager with the same name takes them back. */
  readonly manager: string;
  /** The host folder for the runners' function sockets, mounted at the same path (at most 40 bytes: socket paths are short). */
  readonly iofsRoot: string;
  /** The memory (MB) each runner offers to calls (its FN_MAX_TOTAL_MEMORY_BYTES). */
  readonly runnerMemMb: number;
  /** Where runner ports are published and dialled (default 127.0.0.1: LBs on this host). */
  readonly publishHost?: string;
  /** The engine socket's path on the host, mounted into runners (default /var/run/docker.sock). */
  readonly engineSocket?: string;
  /** More environment for the runners (FN_LOG_LEVEL, FN_CONTAINER_LABEL_TAG, TLS files, ...). */
  readonly runnerEnv?: Readonly<Record<string, string>>;
  /** More labels on the runner containers. */
  readonly labels?: Readonly<Record<string, string>>;
  /** How long a removed runner may drain its calls before it is killed (s, default 30). */
  readonly stopTimeoutS?: number;
}

/** What makes a container of the fnts image a runner of a group: the role, port, socket folder and memory, and the manager's extras. */
export function runnerEnvironment(o: Pick<DockerPlaneOptions, 'runnerMemMb' | 'runnerEnv'>, iofs: string): string[] {
  const env = {
    FN_NODE_TYPE: 'pure-runner',
    FN_GRPC_PORT: String(RUNNER_GRPC_PORT),
    FN_IOFS_PATH: iofs,
    FN_MAX_TOTAL_MEMORY_BYTES: String(o.runnerMemMb * 1024 * 1024),
    ...o.runnerEnv,
  };
  return Object.entries(env).map(([k, v]) => `${k}=${v}`);
}

export function engineError(what: string, err: unknown): ControlPlaneError {
  return new ControlPlaneError('unreachable', `the Docker engine could not ${what}: ${(err as Error).message}; check that dockerd runs and its socket is mounted (DOCKER_HOST)`, { cause: err });
}

export function statusCode(err: unknown): number | undefined {
  return (err as { statusCode?: number }).statusCode;
}

export class DockerPlane implements ControlPlane {
  readonly kind = 'docker';
  private readonly docker: Docker;

  constructor(private readonly o: DockerPlaneOptions) {
    this.docker = o.docker ?? new Docker({ socketPath: '/var/run/docker.sock' });
    if (Buffer.byteLength(o.iofsRoot) > 40) {
      throw new ControlPlaneError('invalid', `the runners' socket folder ${o.iofsRoot} is too long (at most 40 bytes: unix socket paths are short); use e.g. /tmp/fnts-pool`);
    }
  }

  private containers(group: string): Promise<Docker.ContainerInfo[]> {
    return this.docker.listContainers({ all: true, filters: { label: [`${GROUP_LABEL}=${group}`, `${MANAGER_LABEL}=${this.o.manager}`] } }).catch((err: unknown) => {
      throw engineError('list the runners', err);
    });
  }

  async runners(group: string): Promise<RunnerInfo[]> {
    checkGroup(group);
    const out: RunnerInfo[] = [];
    for (const c of await this.containers(group)) {
      if (c.State === 'exited' || c.State === 'dead') {
        // It failed more than its restart policy allows: a runner no more.
        await this.removeContainer(c.Id, c.Names[0]?.slice(1));
        continue;
      }
      const port = c.State === 'running' ? c.Ports.find((p) => p.PrivatePort === RUNNER_GRPC_PORT && p.PublicPort)?.PublicPort : undefined;
      out.push({ id: c.Names[0]?.slice(1) ?? c.Id, address: port ? `${this.o.publishHost ?? '127.0.0.1'}:${port}` : undefined, createdAt: c.Created * 1000 });
    }
    return out;
  }

  async provision(group: string, n: number): Promise<number> {
    checkGroup(group);
    const started = await Promise.allSettled(Array.from({ length: n }, () => this.start(group)));
    const failed = started.find((s): s is PromiseRejectedResult => s.status === 'rejected');
    if (failed && started.every((s) => s.status === 'rejected')) throw failed.reason;
    return started.filter((s) => s.status === 'fulfilled').length;
  }

  private async start(group: string): Promise<void> {
    const suffix = randomBytes(4).toString('hex');
    const name = `fnts-runner-${group}-${suffix}`;
    const iofs = join(this.o.iofsRoot, suffix);
    const env = runnerEnvironment(this.o, iofs);
    const socket = this.o.engineSocket ?? '/var/run/docker.sock';
    // The engine would make a missing folder itself, owned by root; the manager runs on the engine's host.
    await mkdir(this.o.iofsRoot, { recursive: true }).catch(() => undefined);
    let container: Docker.Container;
    try {
      container = await this.docker.createContainer({
        name,
        Hostname: name,
        Image: this.o.image,
        Env: env,
        Labels: { ...this.o.labels, [GROUP_LABEL]: group, [MANAGER_LABEL]: this.o.manager },
        ExposedPorts: { [`${RUNNER_GRPC_PORT}/tcp`]: {} },
        StopTimeout: this.o.stopTimeoutS ?? 30,
        HostConfig: {
          PortBindings: { [`${RUNNER_GRPC_PORT}/tcp`]: [{ HostIp: this.o.publishHost ?? '127.0.0.1', HostPort: '' }] },
          Binds: [`${socket}:/var/run/docker.sock`, `${this.o.iofsRoot}:${this.o.iofsRoot}`],
          RestartPolicy: { Name: 'on-failure', MaximumRetryCount: 3 },
        },
      });
    } catch (err) {
      if (statusCode(err) === 404) throw new ControlPlaneError('invalid', `the runner image ${this.o.image} is not on this engine; build it with npm run image:runner (or set FNTS_RUNNER_IMAGE)`, { cause: err });
      throw engineError('create a runner', err);
    }
    try {
      await container.start();
    } catch (err) {
      await container.remove({ force: true }).catch(() => undefined);
      throw engineError('start a runner', err);
    }
  }

  async remove(group: string, id: string): Promise<void> {
    checkGroup(group);
    const mine = (await this.containers(group)).find((c) => c.Names[0] === `/${id}`);
    if (!mine) return;
    try {
      // SIGTERM: the runner refuses new calls, finishes those in flight, removes its function containers.
      await this.docker.getContainer(mine.Id).stop({ t: this.o.stopTimeoutS ?? 30 });
    } catch (err) {
      if (statusCode(err) !== 304 && statusCode(err) !== 404) throw engineError(`stop runner ${id}`, err);
    }
    await this.removeContainer(mine.Id, id);
  }

  /** Removes a runner container, what it left behind (function containers, if it was killed) and its socket folder. */
  private async removeContainer(containerId: string, name: string | undefined): Promise<void> {
    try {
      await this.docker.getContainer(containerId).remove({ force: true });
    } catch (err) {
      if (statusCode(err) !== 404 && statusCode(err) !== 409) throw engineError(`remove runner ${name ?? containerId}`, err);
    }
    if (!name) return;
    const left = await this.docker.listContainers({ all: true, filters: { label: [INSTANCE_LABEL] } }).catch(() => []);
    await Promise.all(left.filter((c) => c.Labels[INSTANCE_LABEL]?.startsWith(`${name}/`)).map((c) => this.docker.getContainer(c.Id).remove({ force: true }).catch(() => undefined)));
    await rm(join(this.o.iofsRoot, name.slice(-8)), { recursive: true, force: true }).catch(() => undefined);
  }

  async close(): Promise<void> {}
}
