/**
 * The `kubernetes` control plane: each group is a Deployment of runner pods,
 * scaled through its `scale` subresource with @kubernetes/client-node; each
 * pod is a runner, dialled at its pod IP on port 9190.
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
 * TLS: with `tlsSecret`, each runner pod mounts that Secret (keys tls.crt,
 * tls.key, ca.crt: the manager's own certificate, as cert-manager and
 * `kubectl create secret tls` name them, plus the CA) read-only and serves
 * its port with it; a pod cannot see the manager's files, and the key must
 * not sit in the Deployment's spec, which more people may read than the
 * Secret. Without it runners serve plaintext on their pod address
 * (compileConfig allows that only with FNTS_GRPC_INSECURE=true).
 *
 * The cluster: the kubeconfig client-node finds (KUBECONFIG, ~/.kube/config,
 * or in a pod its service account, whose token it re-reads as it rotates);
 * or, with FNTS_K8S_API_URL, that API server with the service account's
 * token file.
 */
import { ApiException, AppsV1Api, CoreV1Api, KubeConfig, PatchStrategy, setHeaderOptions, type V1Deployment, type V1Pod } from '@kubernetes/client-node';
import { checkGroup, ControlPlaneError, type ControlPlane, type RunnerInfo } from '../control-plane.js';
import { GROUP_LABEL, MANAGER_LABEL, RUNNER_GRPC_PORT, runnerEnvironment, type RunnerTlsFiles } from './docker.js';

export interface KubernetesPlaneOptions {
  /** An API server to use instead of the kubeconfig's, e.g. https://10.96.0.1:443 (FNTS_K8S_API_URL). */
  readonly apiUrl?: string | undefined;
  readonly namespace: string;
  /** With `apiUrl`: the bearer token's file (default: the service account's). */
  readonly tokenFile?: string;
  readonly image: string;
  readonly manager: string;
  readonly runnerMemMb: number;
  readonly runnerEnv?: Readonly<Record<string, string>>;
  /** The Docker engine beside each runner (default docker:27-dind). */
  readonly dindImage?: string;
  /** How long a removed runner may drain (s, default 30). */
  readonly stopTimeoutS?: number;
  /** The Secret (tls.crt, tls.key, ca.crt) runner pods serve mutual TLS with (FNTS_K8S_TLS_SECRET); undefined: plaintext. */
  readonly tlsSecret?: string | undefined;
}

const SERVICE_ACCOUNT = '/var/run/secrets/kubernetes.io/serviceaccount';
const IOFS = '/iofs';
/** Where a runner pod mounts its TLS Secret. */
const K8S_TLS_FILES: RunnerTlsFiles = { dir: '/run/fnts/tls', cert: 'tls.crt', key: 'tls.key', ca: 'ca.crt' };
/** Patches are JSON merge patches. */
const MERGE_PATCH = setHeaderOptions('Content-Type', PatchStrategy.MergePatch);

function kubeConfig(o: KubernetesPlaneOptions): KubeConfig {
  const kc = new KubeConfig();
  if (o.apiUrl === undefined) kc.loadFromDefault();
  else
    kc.loadFromClusterAndUser(
      // Plain http (a local proxy such as kubectl proxy) has no certificate to verify.
      o.apiUrl.startsWith('https:') ? { name: 'fnts', server: o.apiUrl, skipTLSVerify: false, caFile: `${SERVICE_ACCOUNT}/ca.crt` } : { name: 'fnts', server: o.apiUrl, skipTLSVerify: true },
      { name: 'fnts', authProvider: { name: 'tokenFile', config: { tokenFile: o.tokenFile ?? `${SERVICE_ACCOUNT}/token` } } },
    );
  return kc;
}

export class KubernetesPlane implements ControlPlane {
  readonly kind = 'kubernetes';
  private readonly apps: AppsV1Api;
  private readonly core: CoreV1Api;
  private readonly server: string;

  constructor(private readonly o: KubernetesPlaneOptions) {
    const kc = kubeConfig(o);
    this.server = kc.getCurrentCluster()?.server ?? '(no cluster)';
    this.apps = kc.makeApiClient(AppsV1Api);
    this.core = kc.makeApiClient(CoreV1Api);
  }

  private deployment(group: string): string {
    return `fnts-runners-${group}`;
  }

  private selector(group: string): string {
    return `${GROUP_LABEL}=${group},${MANAGER_LABEL}=${this.o.manager}`;
  }

  /** One API request; undefined for a 404, a ControlPlaneError saying what to do for any other failure. */
  private async api<T>(what: string, request: () => Promise<T>): Promise<T | undefined> {
    try {
      return await request();
    } catch (err) {
      if (err instanceof ApiException) {
        const code = err.code as number;
        if (code === 404) return undefined;
        const message = (typeof err.body === 'string' ? (JSON.parse(err.body || '{}') as { message?: string }).message : (err.body as { message?: string } | undefined)?.message) ?? String(err.body);
        if (code === 401 || code === 403) {
          throw new ControlPlaneError(
            'refused',
            `the Kubernetes API refused ${what} (${code}: ${message}); give the manager's service account the Role in deploy/kubernetes (deployments, deployments/scale, pods in namespace ${this.o.namespace})`,
          );
        }
        throw new ControlPlaneError('refused', `the Kubernetes API answered ${what} with ${code}: ${message}`);
      }
      throw new ControlPlaneError('unreachable', `the Kubernetes API at ${this.server} does not answer ${what} (${(err as Error).message}); check the kubeconfig or FNTS_K8S_API_URL`, { cause: err });
    }
  }

  async runners(group: string): Promise<RunnerInfo[]> {
    checkGroup(group);
    const pods = await this.api(`GET pods of ${group}`, () => this.core.listNamespacedPod({ namespace: this.o.namespace, labelSelector: this.selector(group) }));
    return (pods?.items ?? [])
      .filter((p: V1Pod) => !p.metadata?.deletionTimestamp && p.status?.phase !== 'Succeeded' && p.status?.phase !== 'Failed')
      .map((p: V1Pod) => {
        const ip = p.status?.phase === 'Running' ? p.status.podIP : undefined;
        return {
          id: p.metadata!.name!,
          address: ip ? `${ip.includes(':') ? `[${ip}]` : ip}:${RUNNER_GRPC_PORT}` : undefined,
          createdAt: new Date(p.metadata!.creationTimestamp!).getTime(),
        };
      });
  }

  async provision(group: string, n: number): Promise<number> {
    checkGroup(group);
    if (n <= 0) return 0;
    const name = this.deployment(group);
    const scale = await this.api(`GET the scale of ${name}`, () => this.apps.readNamespacedDeploymentScale({ name, namespace: this.o.namespace }));
    if (!scale) {
      await this.api(`POST deployment ${name}`, () => this.apps.createNamespacedDeployment({ namespace: this.o.namespace, body: this.spec(group, n) }));
      return n;
    }
    await this.scaleTo(group, (scale.spec?.replicas ?? 0) + n);
    return n;
  }

  async remove(group: string, id: string): Promise<void> {
    checkGroup(group);
    const body = { metadata: { annotations: { 'controller.kubernetes.io/pod-deletion-cost': '-2147483647' } } };
    const pod = await this.api(`PATCH pod ${id}`, () => this.core.patchNamespacedPod({ name: id, namespace: this.o.namespace, body }, MERGE_PATCH));
    if (!pod) return;
    const name = this.deployment(group);
    const scale = await this.api(`GET the scale of ${name}`, () => this.apps.readNamespacedDeploymentScale({ name, namespace: this.o.namespace }));
    if (!scale) return;
    await this.scaleTo(group, Math.max(0, (scale.spec?.replicas ?? 0) - 1));
  }

  private async scaleTo(group: string, replicas: number): Promise<void> {
    const name = this.deployment(group);
    await this.api(`PATCH the scale of ${name}`, () => this.apps.patchNamespacedDeploymentScale({ name, namespace: this.o.namespace, body: { spec: { replicas } } }, MERGE_PATCH));
  }

  private spec(group: string, replicas: number): V1Deployment {
    const labels = { app: 'fnts-runner', [GROUP_LABEL]: group, [MANAGER_LABEL]: this.o.manager };
    // The pod's own engine, in the dind container beside the runner.
    const tls = this.o.tlsSecret !== undefined;
    const env = runnerEnvironment(this.o, IOFS, { socket: undefined, env: { DOCKER_HOST: 'unix:///var/run/dind/docker.sock' } }, tls ? K8S_TLS_FILES : undefined).map((kv) => ({
      name: kv.slice(0, kv.indexOf('=')),
      value: kv.slice(kv.indexOf('=') + 1),
    }));
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
                env,
                ports: [{ name: 'grpc', containerPort: RUNNER_GRPC_PORT }],
                readinessProbe: { tcpSocket: { port: RUNNER_GRPC_PORT } },
                resources: { requests: { memory: `${this.o.runnerMemMb}Mi` } },
                volumeMounts: [{ name: 'iofs', mountPath: IOFS }, { name: 'dind', mountPath: '/var/run/dind' }, ...(tls ? [{ name: 'tls', mountPath: K8S_TLS_FILES!.dir, readOnly: true }] : [])],
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
              // Only the runner container mounts it: the key stays out of the dind container.
              ...(tls ? [{ name: 'tls', secret: { secretName: this.o.tlsSecret!, defaultMode: 0o400 } }] : []),
            ],
          },
        },
      },
    };
  }

  async close(): Promise<void> {}
}
