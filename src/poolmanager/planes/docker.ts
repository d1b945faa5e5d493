/**
 * The `docker` control plane: each runner is a container of the fnts image
 * on the engine DOCKER_HOST names (engine.ts), in the pure-runner role, its
 * RunnerProtocol port (9190) published on `publishHost`: at a port of
 * `portRange` (FNTS_RUNNER_PORT_RANGE) when one is set, else at a port the
 * engine picks.
 *
 * A runner starts its functions' containers beside itself, on the same
 * engine: it gets the engine's socket mounted (or its tcp address). Its
 * functions talk to it over unix sockets in a folder (FN_IOFS_PATH) that
 * the engine mounts into each function container by its host path, so the
 * runner must see the folder at that same path: `iofsRoot` is bind-mounted
 * at its own absolute path, and each runner works in `<iofsRoot>/<its
 * suffix>` (a runner clears its folder when it starts: two runners never
 * share one).
 *
 * Runners are labelled with their group and the manager's name; only those
 * are listed and removed, whatever else runs on the engine.
 *
 * TLS: given the manager's mutual TLS files (`tls`, host paths), each
 * runner gets them bind-mounted read-only and serves its port with them
 * (the runners present the manager's certificate). Without them runners
 * serve plaintext (FNTS_GRPC_INSECURE=true: they bind every address of
 * their container); compileConfig lets a manager do so only when the port
 * is published on loopback, or the operator said the network is private.
 */
import { mkdir, rm } from 'node:fs/promises';
import { join } from 'node:path';
import { randomBytes } from 'node:crypto';
import type Docker from 'dockerode';
import { INSTANCE_LABEL } from '../../models/index.js';
import type { EngineAddress, FleetTls, PortRange } from '../../config/index.js';
import { checkGroup, ControlPlaneError, type ControlPlane, type RunnerInfo } from '../control-plane.js';
import { DEFAULT_ENGINE, describeEngine, engineClient, runnerEngine, type RunnerEngine } from './engine.js';

/** Labels on every runner container. */
export const GROUP_LABEL = 'fnts.pool.group';
export const MANAGER_LABEL = 'fnts.pool.manager';
/** The host port a runner is published on, when the plane chose it from its range: taken while the runner exists. */
export const PORT_LABEL = 'fnts.pool.port';

/** The runner's RunnerProtocol port inside its container. */
export const RUNNER_GRPC_PORT = 9190;

export interface DockerPlaneOptions {
  /** The engine (DOCKER_HOST), for the plane and its runners; default: the local socket, /var/run/docker.sock. */
  readonly engine?: EngineAddress;
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
  /** The host ports runners are published on (FNTS_RUNNER_PORT_RANGE); default: ports the engine picks. */
  readonly portRange?: PortRange;
  /** More environment for the runners (FN_LOG_LEVEL, FN_CONTAINER_LABEL_TAG, TLS files, ...). */
  readonly runnerEnv?: Readonly<Record<string, string>>;
  /** More labels on the runner containers. */
  readonly labels?: Readonly<Record<string, string>>;
  /** How long a removed runner may drain its calls before it is killed (s, default 30). */
  readonly stopTimeoutS?: number;
  /** The manager's mutual TLS files (paths on the engine's host), handed to every runner; undefined: runners serve plaintext. */
  readonly tls?: Pick<FleetTls, 'cert' | 'key' | 'ca'> | undefined;
}

/** Where a runner finds its TLS files (file names in a folder the plane mounts), or plaintext. */
export type RunnerTlsFiles = { readonly dir: string; readonly cert: string; readonly key: string; readonly ca: string } | undefined;

/** The docker plane mounts the manager's files here in each runner. */
const TLS_DIR = '/run/fnts/tls';
const DOCKER_TLS_FILES: RunnerTlsFiles = { dir: TLS_DIR, cert: 'cert.pem', key: 'key.pem', ca: 'ca.pem' };

/**
 * What makes a container of the fnts image a runner of a group: the role,
 * port, socket folder, memory and engine, its TLS files (or plaintext: it
 * binds every address of its container, which is what the plane publishes),
 * and the manager's extras.
 */
export function runnerEnvironment(o: Pick<DockerPlaneOptions, 'runnerMemMb' | 'runnerEnv'>, iofs: string, engine: RunnerEngine, tls: RunnerTlsFiles): string[] {
  const env = {
    FN_NODE_TYPE: 'pure-runner',
    FN_GRPC_PORT: String(RUNNER_GRPC_PORT),
    FNTS_GRPC_LISTEN_HOST: '0.0.0.0',
    FN_IOFS_PATH: iofs,
    FN_MAX_TOTAL_MEMORY_BYTES: String(o.runnerMemMb * 1024 * 1024),
    ...(tls ? { FNTS_GRPC_TLS_CERT: `${tls.dir}/${tls.cert}`, FNTS_GRPC_TLS_KEY: `${tls.dir}/${tls.key}`, FNTS_GRPC_TLS_CA: `${tls.dir}/${tls.ca}` } : { FNTS_GRPC_INSECURE: 'true' }),
    ...engine.env,
    ...o.runnerEnv,
  };
  return Object.entries(env).map(([k, v]) => `${k}=${v}`);
}

export function engineError(engine: EngineAddress, what: string, err: unknown): ControlPlaneError {
  return new ControlPlaneError('unreachable', `the Docker engine at ${describeEngine(engine)} could not ${what}: ${(err as Error).message}; check that dockerd runs there (DOCKER_HOST)`, {
    cause: err,
  });
}

export function statusCode(err: unknown): number | undefined {
  return (err as { statusCode?: number }).statusCode;
}

/** How many ports, found taken by something else on the host as a runner started, one start tries before it gives up. */
const MAX_PORT_CLASHES = 5;

/** The engine refused to publish the port: something outside the plane's view (a host process, a stopped container of another manager) holds it. */
class PortClash extends Error {
  constructor(
    readonly port: number,
    options: { cause: unknown },
  ) {
    super(`port ${port} is taken on the host`, options);
  }
}

export class DockerPlane implements ControlPlane {
  readonly kind = 'docker';
  private readonly docker: Docker;
  private readonly engine: EngineAddress;
  private readonly runnerEngine: RunnerEngine;
  /** Ports chosen for runners whose containers do not exist yet: no other start takes them meanwhile. */
  private readonly claimed = new Set<number>();
  /** Where the search for a free port begins: after the last one handed out, so a port just freed is the last to be taken again. */
  private nextPort: number | undefined;

  constructor(private readonly o: DockerPlaneOptions) {
    this.engine = o.engine ?? DEFAULT_ENGINE;
    this.runnerEngine = runnerEngine(this.engine, 'docker');
    this.docker = engineClient(this.engine);
    if (Buffer.byteLength(o.iofsRoot) > 40) {
      throw new ControlPlaneError('invalid', `the runners' socket folder ${o.iofsRoot} is too long (at most 40 bytes: unix socket paths are short); use e.g. /tmp/fnts-pool`);
    }
  }

  private containers(group: string): Promise<Docker.ContainerInfo[]> {
    return this.docker.listContainers({ all: true, filters: { label: [`${GROUP_LABEL}=${group}`, `${MANAGER_LABEL}=${this.o.manager}`] } }).catch((err: unknown) => {
      throw engineError(this.engine, 'list the runners', err);
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

  /** Starts one runner: on a port of the range (another one when the host has the first taken), or on one the engine picks. */
  private async start(group: string): Promise<void> {
    const range = this.o.portRange;
    if (!range) return this.startOn(group, undefined);
    const clashed: number[] = [];
    for (;;) {
      const port = await this.claimPort(range, clashed);
      try {
        return await this.startOn(group, port);
      } catch (err) {
        if (!(err instanceof PortClash)) throw err;
        clashed.push(port);
        if (clashed.length >= MAX_PORT_CLASHES) {
          throw new ControlPlaneError(
            'refused',
            `ports ${clashed.join(', ')} of FNTS_RUNNER_PORT_RANGE=${range.first}-${range.last} are taken by something else on the engine's host; free them or choose another range`,
            { cause: err },
          );
        }
      } finally {
        this.claimed.delete(port);
      }
    }
  }

  /**
   * A port of `range` that nothing holds: no runner of this manager (in any
   * state: a stopped runner keeps its binding for its restarts), no running
   * container's published port, no start under way, none in `avoid`. It is
   * claimed until the caller releases it. Throws ControlPlaneError
   * (refused) when the range is full.
   */
  private async claimPort(range: PortRange, avoid: readonly number[]): Promise<number> {
    const all = await this.docker.listContainers({ all: true }).catch((err: unknown) => {
      throw engineError(this.engine, 'list the ports runners hold', err);
    });
    const taken = new Set<number>([...this.claimed, ...avoid]);
    for (const c of all) {
      if (c.Labels[MANAGER_LABEL] === this.o.manager && c.Labels[PORT_LABEL]) taken.add(Number(c.Labels[PORT_LABEL]));
      for (const p of c.Ports ?? []) if (p.PublicPort) taken.add(p.PublicPort);
    }
    const size = range.last - range.first + 1;
    const from = this.nextPort ?? range.first;
    for (let i = 0; i < size; i++) {
      const port = range.first + ((from - range.first + i) % size);
      if (taken.has(port)) continue;
      this.claimed.add(port);
      this.nextPort = port === range.last ? range.first : port + 1;
      return port;
    }
    throw new ControlPlaneError(
      'refused',
      `no free port in FNTS_RUNNER_PORT_RANGE=${range.first}-${range.last}: all ${size} are taken by runners (or other containers); widen the range or lower FNTS_MAX_RUNNERS`,
    );
  }

  /** Creates and starts a runner published on `port` (undefined: one the engine picks); a port the host has taken throws PortClash. */
  private async startOn(group: string, port: number | undefined): Promise<void> {
    const suffix = randomBytes(4).toString('hex');
    const name = `fnts-runner-${group}-${suffix}`;
    const iofs = join(this.o.iofsRoot, suffix);
    const tls = this.o.tls;
    const env = runnerEnvironment(this.o, iofs, this.runnerEngine, tls ? DOCKER_TLS_FILES : undefined);
    const socket = this.runnerEngine.socket;
    const tlsBinds = tls ? [`${tls.cert}:${TLS_DIR}/cert.pem:ro`, `${tls.key}:${TLS_DIR}/key.pem:ro`, `${tls.ca}:${TLS_DIR}/ca.pem:ro`] : [];
    // The engine would make a missing folder itself, owned by root; the manager runs on the engine's host.
    await mkdir(this.o.iofsRoot, { recursive: true }).catch(() => undefined);
    let container: Docker.Container;
    try {
      container = await this.docker.createContainer({
        name,
        Hostname: name,
        Image: this.o.image,
        Env: env,
        Labels: { ...this.o.labels, [GROUP_LABEL]: group, [MANAGER_LABEL]: this.o.manager, ...(port === undefined ? {} : { [PORT_LABEL]: String(port) }) },
        ExposedPorts: { [`${RUNNER_GRPC_PORT}/tcp`]: {} },
        StopTimeout: this.o.stopTimeoutS ?? 30,
        HostConfig: {
          PortBindings: { [`${RUNNER_GRPC_PORT}/tcp`]: [{ HostIp: this.o.publishHost ?? '127.0.0.1', HostPort: port === undefined ? '' : String(port) }] },
          Binds: [...(socket ? [`${socket}:/var/run/docker.sock`] : []), `${this.o.iofsRoot}:${this.o.iofsRoot}`, ...tlsBinds],
          RestartPolicy: { Name: 'on-failure', MaximumRetryCount: 3 },
        },
      });
    } catch (err) {
      if (statusCode(err) === 404) {
        throw new ControlPlaneError(
          'invalid',
          `the runner image ${this.o.image} is not on the engine at ${describeEngine(this.engine)}; build it with npm run image:runner (or set FNTS_RUNNER_IMAGE)`,
          { cause: err },
        );
      }
      throw engineError(this.engine, 'create a runner', err);
    }
    try {
      await container.start();
    } catch (err) {
      await container.remove({ force: true }).catch(() => undefined);
      // The engine says so only in words: "port is already allocated" (another container), "address already in use" (a host process).
      if (port !== undefined && /port is already allocated|address already in use/i.test((err as Error).message)) throw new PortClash(port, { cause: err });
      throw engineError(this.engine, 'start a runner', err);
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
      if (statusCode(err) !== 304 && statusCode(err) !== 404) throw engineError(this.engine, `stop runner ${id}`, err);
    }
    await this.removeContainer(mine.Id, id);
  }

  /** Removes a runner container, what it left behind (function containers, if it was killed) and its socket folder. */
  private async removeContainer(containerId: string, name: string | undefined): Promise<void> {
    try {
      await this.docker.getContainer(containerId).remove({ force: true });
    } catch (err) {
      if (statusCode(err) !== 404 && statusCode(err) !== 409) throw engineError(this.engine, `remove runner ${name ?? containerId}`, err);
    }
    if (!name) return;
    const left = await this.docker.listContainers({ all: true, filters: { label: [INSTANCE_LABEL] } }).catch(() => []);
    await Promise.all(
      left
        .filter((c) => c.Labels[INSTANCE_LABEL]?.startsWith(`${name}/`))
        .map((c) =>
          this.docker
            .getContainer(c.Id)
            .remove({ force: true })
            .catch(() => undefined),
        ),
    );
    await rm(join(this.o.iofsRoot, name.slice(-8)), { recursive: true, force: true }).catch(() => undefined);
  }

  async close(): Promise<void> {}
}
