/**
 * The managed fleet's manifests (deploy/swarm, deploy/kubernetes) start the
 * roles they say: every service's environment is one fnts accepts
 * (compileConfig, as the process would at start, its TLS files where the
 * service mounts them from secrets), the LB finds the pool manager where it
 * listens, and the manager's Kubernetes Role allows what the kubernetes
 * plane asks of the API. Every gRPC port is mutual TLS (or loopback), and
 * every LB and pool manager shows the API node a token (FN_TOKEN).
 */
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { loadAllYaml, loadYaml, type V1Deployment, type V1Role, type V1Service } from '@kubernetes/client-node';
import { afterAll, describe, expect, it } from 'vitest';
import { compileConfig, isLoopbackHost, type Config } from '../../src/config/index.js';

const dir = mkdtempSync(join(tmpdir(), 'fnts-manifests-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));
const file = (path: string): string => readFileSync(new URL(`../../${path}`, import.meta.url), 'utf8');
const TLS_VARS = ['FNTS_GRPC_TLS_CERT', 'FNTS_GRPC_TLS_KEY', 'FNTS_GRPC_TLS_CA'] as const;

/**
 * `env` with each TLS file moved under `dir` (a file made there), once the
 * service is found to mount it from a secret (`mounted`): what the process
 * would read in its container.
 */
function withMountedFiles(service: string, env: Record<string, string>, mounted: (path: string) => boolean): Record<string, string> {
  const out = { ...env };
  for (const name of TLS_VARS) {
    const path = env[name];
    if (path === undefined) continue;
    expect(mounted(path), `${service}: ${name}=${path} is not in a secret it mounts`).toBe(true);
    const local = join(dir, service, path);
    mkdirSync(dirname(local), { recursive: true });
    writeFileSync(local, 'PEM');
    out[name] = local;
  }
  return out;
}

/** Every fleet port of a role that serves one is mutual TLS, or loopback; every LB and pool manager has a token. */
function expectSecureFleetRole(service: string, config: Config, env: Record<string, string>): void {
  if (config.nodeType === 'pure-runner' || config.nodeType === 'poolmanager') {
    expect(config.fleet.tls !== undefined || isLoopbackHost(config.fleet.grpcListenHost), `${service}: plaintext gRPC on ${config.fleet.grpcListenHost}`).toBe(true);
    expect(config.fleet.insecure, `${service}: FNTS_GRPC_INSECURE`).toBe(false);
  }
  if (config.nodeType === 'lb' || config.nodeType === 'poolmanager') {
    expect(env['FN_TOKEN'], `${service}: FN_TOKEN`).toBeTruthy();
    // An LB dials runners and a pool manager: only with certificates.
    expect(config.fleet.tls, `${service}: FNTS_GRPC_TLS_*`).toBeDefined();
  }
}

describe('deploy/swarm/fnts-stack.yml', () => {
  // Compose's ${VAR:-default}, as `docker stack deploy` fills it in with nothing set; ${VAR:?message}, as the deploying shell sets it.
  const text = file('deploy/swarm/fnts-stack.yml')
    .replace(/\$\{[A-Z_]+:-([^}]*)\}/g, '$1')
    .replace(/\$\{([A-Z_]+):\?[^}]*\}/g, 'from-the-shell-$1');
  const stack = loadYaml<{ services: Record<string, { environment?: Record<string, string>; secrets?: string[] }>; secrets?: Record<string, unknown> }>(text);
  // Swarm mounts each secret a service lists at /run/secrets/<name>.
  const env = (service: string): Record<string, string> =>
    withMountedFiles(service, stack.services[service]?.environment ?? {}, (path) => (stack.services[service]?.secrets ?? []).some((name) => path === `/run/secrets/${name}`));

  it('has an API node, an LB and a pool manager on the swarm plane, each with settings fnts takes', () => {
    expect(Object.keys(stack.services).sort()).toEqual(['api', 'lb', 'poolmanager']);
    for (const name of Object.keys(stack.services)) expect(() => compileConfig(env(name), dir), name).not.toThrow();
    expect(compileConfig(env('poolmanager'), dir).pool).toMatchObject({ controlPlane: 'swarm' });
  });

  it("runs the fleet under mutual TLS from docker secrets, with tokens: runners checked by the name in the manager's certificate", () => {
    for (const name of Object.keys(stack.services)) expectSecureFleetRole(name, compileConfig(env(name), dir), env(name));
    for (const used of Object.values(stack.services).flatMap((s) => s.secrets ?? [])) expect(stack.secrets?.[used], `secret ${used}`).toBeDefined();
    // The manager's runners present its certificate: LBs and the manager expect the name fnts certs put in it (the node's name, as the LBs dial it).
    const manager = compileConfig(env('poolmanager'), dir);
    expect(compileConfig(env('lb'), dir).fleet.tls?.runnerName).toBe('poolmanager');
    expect(manager.fleet.tls?.runnerName).toBe('poolmanager');
    expect(stack.services['poolmanager']!.environment!['FNTS_GRPC_TLS_CERT']).toBe('/run/secrets/fnts-poolmanager.crt');
  });

  it("points the LB at the API node and at the pool manager's gRPC port", () => {
    const lb = compileConfig(env('lb'), dir).fleet;
    const manager = compileConfig(env('poolmanager'), dir).pool;
    expect(lb.npmAddress).toBe(`poolmanager:${manager.grpcPort}`);
    expect(lb.runnerApiUrl).toBe(`http://api:${compileConfig(env('api'), dir).port}`);
  });
});

describe('deploy/kubernetes/fnts.yaml', () => {
  const objects = loadAllYaml(file('deploy/kubernetes/fnts.yaml')) as Array<{ kind?: string; metadata?: { name?: string } }>;
  const deployments = objects.filter((o): o is V1Deployment => o.kind === 'Deployment');
  const env = (name: string): Record<string, string> => {
    const d = deployments.find((x) => x.metadata?.name === name)!;
    const pod = d.spec!.template.spec!;
    const container = pod.containers[0]!;
    // A value from a Secret is there in the pod, whatever it holds.
    const pairs = (container.env ?? []).map((e) => [e.name, e.value ?? (e.valueFrom?.secretKeyRef ? `from-secret-${e.valueFrom.secretKeyRef.name}` : '')]);
    const secretMounts = (container.volumeMounts ?? []).filter((m) => pod.volumes?.some((v) => v.name === m.name && v.secret));
    // In a pod, Kubernetes sets where its API server is.
    return withMountedFiles(name, { KUBERNETES_SERVICE_HOST: '10.96.0.1', KUBERNETES_SERVICE_PORT: '443', ...Object.fromEntries(pairs) }, (path) =>
      secretMounts.some((m) => path.startsWith(`${m.mountPath}/`)),
    );
  };

  it('has Deployments of an API node, an LB and a pool manager on the kubernetes plane, each with settings fnts takes', () => {
    expect(deployments.map((d) => d.metadata!.name).sort()).toEqual(['fnts-api', 'fnts-lb', 'fnts-poolmanager']);
    for (const d of deployments) expect(() => compileConfig(env(d.metadata!.name!), dir), d.metadata!.name).not.toThrow();
    expect(compileConfig(env('fnts-poolmanager'), dir).pool.controlPlane).toBe('kubernetes');
  });

  it("runs the fleet under mutual TLS from Secrets, with tokens: runner pods mount the manager's Secret, checked by the name in its certificate", () => {
    for (const d of deployments) expectSecureFleetRole(d.metadata!.name!, compileConfig(env(d.metadata!.name!), dir), env(d.metadata!.name!));
    const manager = compileConfig(env('fnts-poolmanager'), dir);
    const pod = deployments.find((d) => d.metadata?.name === 'fnts-poolmanager')!.spec!.template.spec!;
    // The Secret runner pods mount is the one the manager's own files come from.
    expect(pod.volumes?.find((v) => v.secret?.secretName === manager.pool.k8sTlsSecret)).toBeDefined();
    expect(env('fnts-poolmanager')['FN_TOKEN']).toBe('from-secret-fnts-token');
    expect(env('fnts-lb')['FN_TOKEN']).toBe('from-secret-fnts-token');
    // The LB dials the manager by its Service name, the name fnts certs puts in the manager's certificate, and expects it of runners too.
    expect(compileConfig(env('fnts-lb'), dir).fleet.tls?.runnerName).toBe('fnts-poolmanager');
    expect(manager.fleet.tls?.runnerName).toBe('fnts-poolmanager');
  });

  it("points the LB at the pool manager's Service and gRPC port", () => {
    const service = objects.find((o): o is V1Service => o.kind === 'Service' && o.metadata?.name === 'fnts-poolmanager')!;
    const grpcPort = compileConfig(env('fnts-poolmanager'), dir).pool.grpcPort;
    expect(service.spec!.ports!.map((p) => p.port)).toContain(grpcPort);
    expect(compileConfig(env('fnts-lb'), dir).fleet.npmAddress).toBe(`fnts-poolmanager:${grpcPort}`);
  });

  it("gives the manager's service account what the kubernetes plane asks of the API", () => {
    const role = objects.find((o): o is V1Role => o.kind === 'Role')!;
    const allowed = (resource: string, verb: string): boolean => (role.rules ?? []).some((r) => (r.resources ?? []).includes(resource) && r.verbs.includes(verb));
    // src/poolmanager/planes/kubernetes.ts: list and patch pods, read and create Deployments, read and patch their scale.
    for (const [resource, verb] of [
      ['pods', 'list'],
      ['pods', 'patch'],
      ['deployments', 'create'],
      ['deployments/scale', 'get'],
      ['deployments/scale', 'patch'],
    ] as const) {
      expect(allowed(resource, verb), `${verb} ${resource}`).toBe(true);
    }
  });
});
