/**
 * The `kubernetes` control plane: each group is a Deployment of runner pods,
 * scaled through its `scale` subresource; each pod is a runner, dialled at
 * its pod IP on port 9190. Written against the REST API with fetch (apps/v1
 * Deployments, core/v1 Pods by label selector), not @kubernetes/client-node:
 * the calls are few and the client adds a large dependency.
 *
 * A runner pod holds two containers: the fnts runner and a Docker engine
 * (docker:dind) that runs its functions' containers, with the socket folder
 * (an emptyDir) mounted at the same path in both, so the engine mounts it
 * into function containers as the runner sees it.
 *
 * Removing one runner, not whichever the ReplicaSet would pick: the pod is
 * given the lowest deletion cost (controller.kubernetes.io/pod-deletion-cost)
 * and the replica count drops by one; the ReplicaSet deletes that pod, and
 * the kubelet's SIGTERM drains it.
 *
 * In a pod the service account's token is read from its file for each
 * request (it is rotated); the API server's CA comes from
 * NODE_EXTRA_CA_CERTS (the manifests set it to the service account's ca.crt).
 */
import { readFile } from 'node:fs/promises';
import { checkGroup, ControlPlaneError, type ControlPlane, type RunnerInfo } from '../control-plane.js';
import { GROUP_LABEL, MANAGER_LABEL, RUNNER_GRPC_PORT, runnerEnvironment } from './docker.js';

export interface KubernetesPlaneOptions {
  /** The API server, e.g. https://10.96.0.1:443. */
  readonly apiUrl: string;
  readonly namespace: string;
  /** The bearer token's file (default: the service account's); undefined token when it cannot be read. */
  readonly tokenFile?: string;
  readonly image: string;
  readonly manager: string;
  readonly runnerMemMb: number;
  readonly runnerEnv?: Readonly<Record<string, string>>;
  /** The Docker engine beside each runner (default docker:27-dind). */
  readonly dindImage?: string;
  /** How long a removed runner may drain (s, default 30). */
  readonly stopTimeoutS?: number;
}

const TOKEN_FILE = '/var/run/secrets/kubernetes.io/serviceaccount/token';
const IOFS = '/iofs';

interface Pod {
  metadata: { name: string; creationTimestamp: string; deletionTimestamp?: string };
  status?: { phase?: string; podIP?: string; conditions?: Array<{ type: string; status: string }> };
}

export class KubernetesPlane implements ControlPlane {
  readonly kind = 'kubernetes';

  constructor(private readonly o: KubernetesPlaneOptions) {}

  private deployment(group: string): string {
    return `fnts-runners-${group}`;
  }

  private selector(group: string): string {
    return `${GROUP_LABEL}=${group},${MANAGER_LABEL}=${this.o.manager}`;
  }

  /** One API request; answers the JSON body, or undefined for a 404. */
  private async request<T>(method: string, path: string, body?: unknown, contentType = 'application/json'): Promise<T | undefined> {
    const token = await readFile(this.o.tokenFile ?? TOKEN_FILE, 'utf8').then(
      (t) => t.trim(),
      () => undefined,
    );
    let res: Response;
    try {
      res = await fetch(`${this.o.apiUrl}${path}`, {
        method,
        headers: { accept: 'application/json', ...(body === undefined ? {} : { 'content-type': contentType }), ...(token ? { authorization: `Bearer ${token}` } : {}) },
        ...(body === undefined ? {} : { body: JSON.stringify(body) }),
        signal: AbortSignal.timeout(10_000),
      });
    } catch (err) {
      throw new ControlPlaneError('unreachable', `the Kubernetes API at ${this.o.apiUrl} does not answer (${(err as Error).message}); check FNTS_K8S_API_URL, and NODE_EXTRA_CA_CERTS for its certificate`, { cause: err });
    }
    if (res.status === 404) return undefined;
    const text = await res.text();
    if (!res.ok) {
      const message = (JSON.parse(text || '{}') as { message?: string }).message ?? text;
      if (res.status === 401 || res.status === 403) {
        throw new ControlPlaneError('refused', `the Kubernetes API refused ${method} ${path} (${res.status}: ${message}); give the manager's service account the Role in deploy/kubernetes (deployments, deployments/scale, pods in namespace ${this.o.namespace})`);
      }
      throw new ControlPlaneError('refused', `the Kubernetes API answered ${method} ${path} with ${res.status}: ${message}`);
    }
    return JSON.parse(text) as T;
  }

  async runners(group: string): Promise<RunnerInfo[]> {
    checkGroup(group);
    const pods = await this.request<{ items: Pod[] }>('GET', `/api/v1/namespaces/${this.o.namespace}/pods?labelSelector=${encodeURIComponent(this.selector(group))}`);
    return (pods?.items ?? [])
      .filter((p) => !p.metadata.deletionTimestamp && p.status?.phase !== 'Succeeded' && p.status?.phase !== 'Failed')
      .map((p) => ({
        id: p.metadata.name,
        address: p.status?.phase === 'Running' && p.status.podIP ? `${p.status.podIP.includes(':') ? `[${p.status.podIP}]` : p.status.podIP}:${RUNNER_GRPC_PORT}` : undefined,
        createdAt: Date.parse(p.metadata.creationTimestamp),
      }));
  }

  async provision(group: string, n: number): Promise<number> {
    checkGroup(group);
    if (n <= 0) return 0;
    const base = `/apis/apps/v1/namespaces/${this.o.namespace}/deployments`;
    const scale = await this.request<{ spec: { replicas?: number } }>('GET', `${base}/${this.deployment(group)}/scale`);
    if (!scale) {
      await this.request('POST', base, this.spec(group, n));
      return n;
    }
    await this.scaleTo(group, (scale.spec.replicas ?? 0) + n);
    return n;
  }

  async remove(group: string, id: string): Promise<void> {
    checkGroup(group);
    const pod = await this.request('PATCH', `/api/v1/namespaces/${this.o.namespace}/pods/${id}`, { metadata: { annotations: { 'controller.kubernetes.io/pod-deletion-cost': '-2147483647' } } }, 'application/merge-patch+json');
    if (!pod) return;
    const scale = await this.request<{ spec: { replicas?: number } }>('GET', `/apis/apps/v1/namespaces/${this.o.namespace}/deployments/${this.deployment(group)}/scale`);
    if (!scale) return;
    await this.scaleTo(group, Math.max(0, (scale.spec.replicas ?? 0) - 1));
  }

  private async scaleTo(group: string, replicas: number): Promise<void> {
    await this.request('PATCH', `/apis/apps/v1/namespaces/${this.o.namespace}/deployments/${this.deployment(group)}/scale`, { spec: { replicas } }, 'application/merge-patch+json');
  }

  private spec(group: string, replicas: number): unknown {
    const labels = { app: 'fnts-runner', [GROUP_LABEL]: group, [MANAGER_LABEL]: this.o.manager };
    const env = runnerEnvironment(this.o, IOFS).map((kv) => ({ name: kv.slice(0, kv.indexOf('=')), value: kv.slice(kv.indexOf('=') + 1) }));
    return {
      apiVersion: 'apps/v1',
      kind: 'Deployment',
      metadata: { name: this.deployment(group), labels },
      spec: {
        replicas,
        selector: { matchLabels: labels },
        template: {
          metadata: { labels },
          spec: {
            terminationGracePeriodSeconds: this.o.stopTimeoutS ?? 30,
            containers: [
              {
                name: 'runner',
                image: this.o.image,
                args: ['serve'],
                env: [...env, { name: 'DOCKER_HOST', value: 'unix:///var/run/dind/docker.sock' }],
                ports: [{ name: 'grpc', containerPort: RUNNER_GRPC_PORT }],
                readinessProbe: { tcpSocket: { port: RUNNER_GRPC_PORT } },
                resources: { requests: { memory: `${this.o.runnerMemMb}Mi` } },
                volumeMounts: [
                  { name: 'iofs', mountPath: IOFS },
                  { name: 'dind', mountPath: '/var/run/dind' },
                ],
              },
              {
                name: 'docker',
                image: this.o.dindImage ?? 'docker:27-dind',
                args: ['--host=unix:///var/run/dind/docker.sock'],
                env: [{ name: 'DOCKER_TLS_CERTDIR', value: '' }],
                securityContext: { privileged: true },
                volumeMounts: [
                  { name: 'iofs', mountPath: IOFS },
                  { name: 'dind', mountPath: '/var/run/dind' },
                ],
              },
            ],
            volumes: [
              { name: 'iofs', emptyDir: {} },
              { name: 'dind', emptyDir: {} },
            ],
          },
        },
      },
    };
  }

  async close(): Promise<void> {}
}
