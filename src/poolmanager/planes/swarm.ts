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
 *
 * TLS: the manager's mutual TLS files (`tls`) become swarm secrets, which
 * swarm hands to every task wherever it runs (a bind mount would need the
 * files on every node, and a manager that got its own files as secrets
 * has no host path to give): one secret per file, named after the
 * manager, the file and a digest of its content, so that runners started
 * after the files change get the new ones, and made once however many
 * groups use them. Without TLS, as in the docker plane, runners serve
 * plaintext (compileConfig allows that only with FNTS_GRPC_INSECURE=true).
 */
import { createHash } from 'node:crypto';
import { mkdir, readFile } from 'node:fs/promises';
import type Docker from 'dockerode';
import type { EngineAddress } from '../../config/index.js';
import { checkGroup, ControlPlaneError, type ControlPlane, type RunnerInfo } from '../control-plane.js';
import { engineError, GROUP_LABEL, MANAGER_LABEL, RUNNER_GRPC_PORT, runnerEnvironment, statusCode, type DockerPlaneOptions, type RunnerTlsFiles } from './docker.js';
import { DEFAULT_ENGINE, engineClient, runnerEngine, type RunnerEngine } from './engine.js';

export interface SwarmPlaneOptions extends Omit<DockerPlaneOptions, 'publishHost' | 'portRange'> {
  /** The network LBs reach runners on; unset: a published host port. */
  readonly network?: string;
  /** Dial published ports here instead of at each node's address (a one-node swarm: 127.0.0.1). */
  readonly publishHost?: string;
}

/** Swarm mounts a task's secrets in this folder, each under its file name. */
const SECRETS_DIR = '/run/secrets';
const SWARM_TLS_FILES: RunnerTlsFiles = { dir: SECRETS_DIR, cert: 'fnts-tls-cert.pem', key: 'fnts-tls-key.pem', ca: 'fnts-tls-ca.pem' };

/** A secret as a service's task template references it. */
interface SecretReference {
  File: { Name: string; UID: string; GID: string; Mode: number };
  SecretID: string;
  SecretName: string;
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
      const secrets = await this.tlsSecrets();
      await this.docker.createService(this.spec(group, n, secrets)).catch((err: unknown) => {
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

  /** The swarm secrets holding the manager's TLS files, made where missing; none without TLS. */
  private async tlsSecrets(): Promise<SecretReference[]> {
    const tls = this.o.tls;
    if (!tls) return [];
    const files = SWARM_TLS_FILES!;
    const wanted = [
      ['cert', tls.cert, files.cert],
      ['key', tls.key, files.key],
      ['ca', tls.ca, files.ca],
    ] as const;
    return Promise.all(
      wanted.map(async ([what, path, file]) => {
        const data = await readFile(path).catch((err: unknown) => {
          throw new ControlPlaneError('invalid', `the TLS file ${path} (FNTS_GRPC_TLS_${what.toUpperCase()}) cannot be read: ${(err as Error).message}`, { cause: err });
        });
        const name = `fnts-${this.o.manager}-tls-${what}-${createHash('sha256').update(data).digest('hex').slice(0, 12)}`;
        // The key only the runner (root in its container) reads.
        return { File: { Name: file, UID: '0', GID: '0', Mode: what === 'key' ? 0o400 : 0o444 }, SecretID: await this.secret(name, data), SecretName: name };
      }),
    );
  }

  /** The id of the secret `name` holding `data`: the existing one, or one made now (another start making it meanwhile is fine). */
  private async secret(name: string, data: Buffer): Promise<string> {
    const find = async (): Promise<string | undefined> => {
      const found = (await this.docker.listSecrets({ filters: { name: [name] } }).catch((err: unknown) => {
        throw this.error('list the TLS secrets', err);
      })) as unknown as Array<{ ID: string; Spec?: { Name?: string } }>;
      return found.find((x) => x.Spec?.Name === name)?.ID;
    };
    const existing = await find();
    if (existing) return existing;
    try {
      const made = (await this.docker.createSecret({ Name: name, Labels: { ...this.o.labels, [MANAGER_LABEL]: this.o.manager }, Data: data.toString('base64') })) as { id?: string; ID?: string };
      return (made.id ?? made.ID)!;
    } catch (err) {
      const raced = statusCode(err) === 409 ? await find() : undefined;
      if (raced) return raced;
      throw this.error('make the TLS secret for the runners', err);
    }
  }

  private spec(group: string, replicas: number, secrets: SecretReference[]): Docker.CreateServiceOptions {
    const socket = this.runnerEngine.socket;
    const stopNs = (this.o.stopTimeoutS ?? 30) * 1e9;
    return {
      Name: this.serviceName(group),
      Labels: { ...this.o.labels, [GROUP_LABEL]: group, [MANAGER_LABEL]: this.o.manager },
      TaskTemplate: {
        ContainerSpec: {
          Image: this.o.image,
          // Each task its own folder (a runner clears its folder when it starts) and its own name in its containers' labels.
          Env: runnerEnvironment(this.o, `${this.o.iofsRoot}/{{.Task.Slot}}`, this.runnerEngine, secrets.length > 0 ? SWARM_TLS_FILES : undefined),
          Hostname: '{{.Task.ID}}',
          Labels: { ...this.o.labels, [GROUP_LABEL]: group, [MANAGER_LABEL]: this.o.manager },
          Mounts: [...(socket ? [{ Type: 'bind', Source: socket, Target: '/var/run/docker.sock' }] : []), { Type: 'bind', Source: this.o.iofsRoot, Target: this.o.iofsRoot }],
          StopGracePeriod: stopNs,
          ...(secrets.length > 0 ? { Secrets: secrets } : {}),
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
