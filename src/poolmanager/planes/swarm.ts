/**
 * The `swarm` control plane: each group is one Docker Swarm service of the
 * fnts image in the pure-runner role, scaled by its replica count; each
 * task is a runner. Its address is the task's own on `network` (port 9190)
 * when one is named (LBs on the same overlay network), else the host port
 * the engine published it on (publish mode host, a port the engine picks)
 * at its node's address (or `publishHost`).
 *
 * Removing one runner, not whichever swarm would pick: its container is
 * stopped (SIGTERM: it drains and exits 0; the restart policy restarts only
 * failures, so its slot stays empty), then the replica count drops by one,
 * which retires the empty slot. This needs the task's container on the
 * engine the manager talks to (a one-node swarm, or runners constrained to
 * the manager's node); for a task elsewhere the count drops and swarm picks,
 * which still loses no call (the runner it stops drains first).
 *
 * Sockets: as the docker plane, the socket folder is bind-mounted at its own
 * path, each task working in `<iofsRoot>/<slot>`; the folder must exist on
 * every node that runs runners. Each task gets its node's engine socket
 * mounted, at the path DOCKER_HOST names (engine.ts): the same on every node.
 */
import { mkdir } from 'node:fs/promises';
import type Docker from 'dockerode';
import type { EngineAddress } from '../../config/index.js';
import { checkGroup, ControlPlaneError, type ControlPlane, type RunnerInfo } from '../control-plane.js';
import { engineError, GROUP_LABEL, MANAGER_LABEL, RUNNER_GRPC_PORT, runnerEnvironment, statusCode, type DockerPlaneOptions } from './docker.js';
import { DEFAULT_ENGINE, engineClient, runnerEngine, type RunnerEngine } from './engine.js';

export interface SwarmPlaneOptions extends Omit<DockerPlaneOptions, 'publishHost' | 'portRange'> {
  /** The network LBs reach runners on; unset: a published host port. */
  readonly network?: string;
  /** Dial published ports here instead of at each node's address (a one-node swarm: 127.0.0.1). */
  readonly publishHost?: string;
}

/** Task states on the way to running, and running. */
const LIVE_STATES = new Set(['new', 'pending', 'assigned', 'accepted', 'preparing', 'ready', 'starting', 'running']);

interface Task {
  ID: string;
  NodeID?: string;
  CreatedAt: string;
  DesiredState: string;
  Status: { State: string; ContainerStatus?: { ContainerID?: string }; PortStatus?: { Ports?: Array<{ TargetPort: number; PublishedPort?: number }> } };
  NetworksAttachments?: Array<{ Network: { Spec: { Name: string } }; Addresses: string[] }>;
}

export class SwarmPlane implements ControlPlane {
  readonly kind = 'swarm';
  private readonly docker: Docker;
  private readonly engine: EngineAddress;
  private readonly runnerEngine: RunnerEngine;
  private readonly nodeAddresses = new Map<string, string>();

  constructor(private readonly o: SwarmPlaneOptions) {
    this.engine = o.engine ?? DEFAULT_ENGINE;
    this.runnerEngine = runnerEngine(this.engine, 'swarm');
    this.docker = engineClient(this.engine);
  }

  private serviceName(group: string): string {
    return `fnts-runners-${this.o.manager}-${group}`.slice(0, 63);
  }

  private async service(group: string): Promise<Docker.Service | undefined> {
    const found = await this.docker.listServices({ filters: { label: [`${GROUP_LABEL}=${group}`, `${MANAGER_LABEL}=${this.o.manager}`] } }).catch((err: unknown) => {
      throw this.error('list the runner services', err);
    });
    return found[0]?.ID ? this.docker.getService(found[0].ID) : undefined;
  }

  private async tasks(group: string): Promise<Task[]> {
    const service = await this.service(group);
    if (!service) return [];
    const tasks = (await this.docker.listTasks({ filters: { service: [service.id], 'desired-state': ['running'] } }).catch((err: unknown) => {
      throw this.error('list the runners', err);
    })) as Task[];
    return tasks.filter((t) => LIVE_STATES.has(t.Status.State));
  }

  private async nodeAddress(nodeId: string | undefined): Promise<string | undefined> {
    if (this.o.publishHost) return this.o.publishHost;
    if (!nodeId) return undefined;
    let address = this.nodeAddresses.get(nodeId);
    if (!address) {
      const node = (await this.docker
        .getNode(nodeId)
        .inspect()
        .catch(() => undefined)) as { Status?: { Addr?: string } } | undefined;
      address = node?.Status?.Addr;
      if (address) this.nodeAddresses.set(nodeId, address);
    }
    return address;
  }

  private async address(t: Task): Promise<string | undefined> {
    if (t.Status.State !== 'running') return undefined;
    if (this.o.network) {
      const ip = t.NetworksAttachments?.find((n) => n.Network.Spec.Name === this.o.network)?.Addresses[0]?.split('/')[0];
      return ip ? `${ip.includes(':') ? `[${ip}]` : ip}:${RUNNER_GRPC_PORT}` : undefined;
    }
    const port = t.Status.PortStatus?.Ports?.find((p) => p.TargetPort === RUNNER_GRPC_PORT)?.PublishedPort;
    const host = await this.nodeAddress(t.NodeID);
    return port && host ? `${host}:${port}` : undefined;
  }

  async runners(group: string): Promise<RunnerInfo[]> {
    checkGroup(group);
    const tasks = await this.tasks(group);
    return Promise.all(tasks.map(async (t) => ({ id: t.ID, address: await this.address(t), createdAt: Date.parse(t.CreatedAt) })));
  }

  async provision(group: string, n: number): Promise<number> {
    checkGroup(group);
    if (n <= 0) return 0;
    const service = await this.service(group);
    if (!service) {
      // A bind mount's folder must exist on the node; this one, at least (the manager's).
      await mkdir(this.o.iofsRoot, { recursive: true }).catch(() => undefined);
      await this.docker.createService(this.spec(group, n)).catch((err: unknown) => {
        throw this.error(`create the runner service of ${group}`, err);
      });
      return n;
    }
    await this.scale(service, group, (replicas) => replicas + n);
    return n;
  }

  async remove(group: string, id: string): Promise<void> {
    checkGroup(group);
    const service = await this.service(group);
    const task = (await this.tasks(group)).find((t) => t.ID === id);
    if (!service || !task) return;
    const containerId = task.Status.ContainerStatus?.ContainerID;
    if (containerId) {
      try {
        await this.docker.getContainer(containerId).stop({ t: this.o.stopTimeoutS ?? 30 });
      } catch (err) {
        // 404: the task runs on another node; 304: it already stopped.
        if (statusCode(err) !== 404 && statusCode(err) !== 304) throw engineError(this.engine, `stop runner ${id}`, err);
      }
      // Until swarm has seen the task end, it may retire another slot when the count drops.
      const until = Date.now() + 10_000;
      while (Date.now() < until && (await this.tasks(group)).some((t) => t.ID === id)) await new Promise((r) => setTimeout(r, 100));
    }
    await this.scale(service, group, (replicas) => Math.max(0, replicas - 1));
  }

  /** Sets the service's replicas to `to(current)`, again if another update came between. */
  private async scale(service: Docker.Service, group: string, to: (replicas: number) => number): Promise<void> {
    for (let attempt = 0; ; attempt++) {
      const info = (await service.inspect()) as { Version: { Index: number }; Spec: Docker.ServiceSpec & { Mode?: { Replicated?: { Replicas?: number } } } };
      const spec = info.Spec;
      const replicas = to(spec.Mode?.Replicated?.Replicas ?? 0);
      try {
        // dockerode's typings take only the spec; its documented _query/_body form carries the version the engine requires.
        await service.update({ _query: { version: info.Version.Index }, _body: { ...spec, Mode: { Replicated: { Replicas: replicas } } } } as unknown as Docker.ServiceSpec);
        return;
      } catch (err) {
        if (attempt < 3 && /update out of sequence/i.test((err as Error).message)) continue;
        throw this.error(`scale the runner service of ${group}`, err);
      }
    }
  }

  private spec(group: string, replicas: number): Docker.CreateServiceOptions {
    const socket = this.runnerEngine.socket;
    const stopNs = (this.o.stopTimeoutS ?? 30) * 1e9;
    return {
      Name: this.serviceName(group),
      Labels: { ...this.o.labels, [GROUP_LABEL]: group, [MANAGER_LABEL]: this.o.manager },
      TaskTemplate: {
        ContainerSpec: {
          Image: this.o.image,
          // Each task its own folder (a runner clears its folder when it starts) and its own name in its containers' labels.
          Env: runnerEnvironment(this.o, `${this.o.iofsRoot}/{{.Task.Slot}}`, this.runnerEngine),
          Hostname: '{{.Task.ID}}',
          Labels: { ...this.o.labels, [GROUP_LABEL]: group, [MANAGER_LABEL]: this.o.manager },
          Mounts: [...(socket ? [{ Type: 'bind', Source: socket, Target: '/var/run/docker.sock' }] : []), { Type: 'bind', Source: this.o.iofsRoot, Target: this.o.iofsRoot }],
          StopGracePeriod: stopNs,
        },
        RestartPolicy: { Condition: 'on-failure', MaxAttempts: 3 },
        ...(this.o.network ? { Networks: [{ Target: this.o.network }] } : {}),
      },
      Mode: { Replicated: { Replicas: replicas } },
      ...(this.o.network ? {} : { EndpointSpec: { Ports: [{ Protocol: 'tcp', TargetPort: RUNNER_GRPC_PORT, PublishMode: 'host' }] } }),
    } as Docker.CreateServiceOptions;
  }

  async close(): Promise<void> {}

  private error(what: string, err: unknown): ControlPlaneError {
    if (/not a swarm manager|swarm mode/i.test((err as Error).message ?? '')) {
      return new ControlPlaneError('unreachable', `the Docker engine could not ${what}: it is not a swarm manager; run docker swarm init (or run the manager on a manager node)`, { cause: err });
    }
    return engineError(this.engine, what, err);
  }
}
