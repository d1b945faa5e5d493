/**
 * The managed fleet's manifests (deploy/swarm, deploy/kubernetes) start the
 * roles they say: every service's environment is one fnts accepts
 * (compileConfig, as the process would at start, its TLS files where the
 * service mounts them from secrets), the LB finds the pool manager where it
 * listens, and the manager's Kubernetes Role allows what the kubernetes
 * plane asks of the API. Every gRPC port is mutual TLS (or loopback), and
 * every LB and pool manager shows the API node a token (FN_TOKEN). Two API
 * nodes share one Postgres (kept on a volume) and one secrets key, and the
 * LBs reach both through one name.
 */
import { createHash } from 'node:crypto';
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { loadAllYaml, loadYaml, type V1Container, type V1Deployment, type V1PodSpec, type V1Role, type V1Service, type V1StatefulSet } from '@kubernetes/client-node';
import { afterAll, describe, expect, it } from 'vitest';
import { compileConfig, type Config } from '../../src/config/index.js';
import { isLoopbackHost } from '../../src/models/index.js';

const dir = mkdtempSync(join(tmpdir(), 'fnts-manifests-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));
const file = (path: string): string => readFileSync(new URL(`../../${path}`, import.meta.url), 'utf8');
const TLS_VARS = ['FNTS_GRPC_TLS_CERT', 'FNTS_GRPC_TLS_KEY', 'FNTS_GRPC_TLS_CA'] as const;

/**
 * What a value the manifests take from outside (a Secret, the deploying
 * shell) holds in the pod: 64 hex characters, as `openssl rand -hex 32`
 * makes the keys, tokens and passwords their headers ask for, one per
 * source, so two variables from the same source hold the same value.
 */
const standIn = (source: string): string => createHash('sha256').update(source).digest('hex');

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
  const raw = file('deploy/swarm/fnts-stack.yml');
  // Compose's ${VAR:-default}, as `docker stack deploy` fills it in with nothing set; ${VAR:?message}, as the deploying shell sets it.
  const text = raw.replace(/\$\{[A-Z_]+:-([^}]*)\}/g, '$1').replace(/\$\{([A-Z_]+):\?[^}]*\}/g, (_, name: string) => standIn(`shell:${name}`));
  interface SwarmService {
    image?: string;
    environment?: Record<string, string>;
    secrets?: string[];
    volumes?: string[];
    healthcheck?: { test?: string[] };
    deploy?: { replicas?: number };
  }
  const stack = loadYaml<{ services: Record<string, SwarmService>; secrets?: Record<string, unknown>; volumes?: Record<string, unknown> }>(text);
  const FNTS_IMAGE = stack.services['lb']!.image;
  // The services that run fnts (the others: Postgres).
  const fnts = Object.keys(stack.services).filter((name) => stack.services[name]!.image === FNTS_IMAGE);
  // Swarm mounts each secret a service lists at /run/secrets/<name>.
  const env = (service: string): Record<string, string> =>
    withMountedFiles(service, stack.services[service]?.environment ?? {}, (path) => (stack.services[service]?.secrets ?? []).some((name) => path === `/run/secrets/${name}`));

  it('asks the deploying shell for each value it needs in a message docker reads as one', () => {
    // docker stack deploy (docker 28) reads a '-' in ${VAR:?message} as ${VAR-default}: the message would become the value, set or not.
    const messages = [...raw.matchAll(/\$\{([A-Z_]+):\?([^}]*)\}/g)].map((m) => [m[1]!, m[2]!] as const);
    expect(messages.map(([name]) => name)).toEqual(expect.arrayContaining(['FNTS_DB_PASSWORD', 'FNTS_SECRET_KEY', 'FNTS_ADMIN_TOKEN', 'FN_TOKEN']));
    for (const [name, message] of messages) expect(message, name).not.toContain('-');
  });

  it('has Postgres, API nodes, an LB and a pool manager on the swarm plane, each fnts one with settings fnts takes', () => {
    expect(Object.keys(stack.services).sort()).toEqual(['api', 'db', 'lb', 'poolmanager']);
    expect(fnts.sort()).toEqual(['api', 'lb', 'poolmanager']);
    for (const name of fnts) expect(() => compileConfig(env(name), dir), name).not.toThrow();
    expect(compileConfig(env('poolmanager'), dir).pool).toMatchObject({ controlPlane: 'swarm' });
  });

  it("runs the fleet under mutual TLS from docker secrets, with tokens: runners checked by the name in the manager's certificate", () => {
    for (const name of fnts) expectSecureFleetRole(name, compileConfig(env(name), dir), env(name));
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

  it('runs two API nodes on the Postgres service, with one secrets key, both behind the name the LB dials', () => {
    const apis = fnts.filter((name) => compileConfig(env(name), dir).nodeType === 'api');
    expect(apis.reduce((n, name) => n + (stack.services[name]!.deploy?.replicas ?? 1), 0)).toBeGreaterThanOrEqual(2);
    const db = stack.services['db']!;
    expect(db.image).toMatch(/^postgres:/);
    const keys = new Set<string>();
    for (const name of apis) {
      const config = compileConfig(env(name), dir);
      // The URL names the Postgres service, its user, database and password (the same shell variable).
      expect(config.db, name).toMatchObject({
        kind: 'postgres',
        host: 'db',
        port: 5432,
        user: db.environment!['POSTGRES_USER'],
        database: db.environment!['POSTGRES_DB'],
        password: db.environment!['POSTGRES_PASSWORD'],
      });
      expect(config.secretKey, `${name}: FNTS_SECRET_KEY`).toBeDefined();
      keys.add(config.secretKey!.bytes().toString('hex'));
      // Swarm's readiness: a task gets requests once its health check, /ready, passes.
      expect(stack.services[name]!.healthcheck?.test?.join(' '), `${name}: health check`).toContain('/ready');
    }
    expect(keys.size, 'one FNTS_SECRET_KEY for every API node').toBe(1);
    // The LB dials the API service's name: swarm's virtual IP spreads its requests over the replicas.
    expect(apis).toContain(new URL(compileConfig(env('lb'), dir).fleet.runnerApiUrl!).hostname);
  });

  it("keeps Postgres's files on a named volume", () => {
    const mount = (stack.services['db']!.volumes ?? []).find((v) => v.endsWith(':/var/lib/postgresql/data'));
    expect(mount, 'a volume at /var/lib/postgresql/data').toBeDefined();
    expect(stack.volumes, 'the volume is declared').toHaveProperty(mount!.split(':')[0]!);
  });
});

describe('deploy/kubernetes/fnts.yaml', () => {
  const objects = loadAllYaml(file('deploy/kubernetes/fnts.yaml')) as Array<{ kind?: string; metadata?: { name?: string } }>;
  const deployments = objects.filter((o): o is V1Deployment => o.kind === 'Deployment');
  const statefulSets = objects.filter((o): o is V1StatefulSet => o.kind === 'StatefulSet');
  const services = objects.filter((o): o is V1Service => o.kind === 'Service');
  const podOf = (name: string): V1PodSpec => [...deployments, ...statefulSets].find((x) => x.metadata?.name === name)!.spec!.template.spec!;
  /** The container's environment as Kubernetes gives it: a value from a Secret is there, whatever it holds; $(VAR) of an earlier variable filled in. */
  const containerEnv = (container: V1Container): Record<string, string> => {
    const out: Record<string, string> = {};
    for (const e of container.env ?? []) {
      const ref = e.valueFrom?.secretKeyRef;
      out[e.name] = ref
        ? standIn(`secret:${ref.name}/${ref.key}`)
        : (e.value ?? '').replace(/\$\$|\$\(([A-Za-z_][A-Za-z0-9_]*)\)/g, (m, v: string | undefined) => (v === undefined ? '$' : (out[v] ?? m)));
    }
    return out;
  };
  const env = (name: string): Record<string, string> => {
    const pod = podOf(name);
    const container = pod.containers[0]!;
    const secretMounts = (container.volumeMounts ?? []).filter((m) => pod.volumes?.some((v) => v.name === m.name && v.secret));
    // In a pod, Kubernetes sets where its API server is.
    return withMountedFiles(name, { KUBERNETES_SERVICE_HOST: '10.96.0.1', KUBERNETES_SERVICE_PORT: '443', ...containerEnv(container) }, (path) =>
      secretMounts.some((m) => path.startsWith(`${m.mountPath}/`)),
    );
  };
  /** The port the Service `name` sends its `port` to, when it selects the pods of `workload`; undefined when it does not. */
  const serviceTo = (name: string, port: number, workload: V1Deployment | V1StatefulSet): number | undefined => {
    const service = services.find((s) => s.metadata?.name === name);
    const labels = workload.spec!.template.metadata?.labels ?? {};
    if (!service || !Object.entries(service.spec?.selector ?? {}).every(([k, v]) => labels[k] === v)) return undefined;
    const target = service.spec?.ports?.find((p) => p.port === port)?.targetPort;
    return target === undefined ? port : Number(target);
  };
  const fromSecret = (name: string, key: string): string => standIn(`secret:${name}/${key}`);

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
    expect(env('fnts-poolmanager')['FN_TOKEN']).toBe(fromSecret('fnts-token', 'token'));
    expect(env('fnts-lb')['FN_TOKEN']).toBe(fromSecret('fnts-token', 'token'));
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

  it('runs two API nodes on the Postgres StatefulSet, with one secrets key from a Secret, both behind the Service the LB dials', () => {
    const apis = deployments.filter((d) => compileConfig(env(d.metadata!.name!), dir).nodeType === 'api');
    expect(apis.reduce((n, d) => n + (d.spec!.replicas ?? 1), 0)).toBeGreaterThanOrEqual(2);
    const db = statefulSets.find((s) => s.metadata?.name === 'fnts-db')!;
    const postgres = db.spec!.template.spec!.containers[0]!;
    expect(postgres.image).toMatch(/^postgres:/);
    const pgEnv = containerEnv(postgres);
    const keySources = new Set<string>();
    for (const d of apis) {
      const name = d.metadata!.name!;
      const config = compileConfig(env(name), dir);
      // FN_DB_URL names the database's Service, its user, database and password ($(...) filled in from the same Secret as Postgres's).
      expect(env(name)['FN_DB_URL'], `${name}: FN_DB_URL`).not.toContain('$(');
      expect(config.db, name).toMatchObject({ kind: 'postgres', user: pgEnv['POSTGRES_USER'], database: pgEnv['POSTGRES_DB'], password: pgEnv['POSTGRES_PASSWORD'] });
      if (config.db.kind !== 'postgres') continue;
      expect(serviceTo(config.db.host, config.db.port, db), `${name}: ${config.db.host}:${config.db.port}`).toBe(5432);
      expect(config.secretKey, `${name}: FNTS_SECRET_KEY`).toBeDefined();
      const ref = d.spec!.template.spec!.containers[0]!.env?.find((e) => e.name === 'FNTS_SECRET_KEY')?.valueFrom?.secretKeyRef;
      expect(ref, `${name}: FNTS_SECRET_KEY from a Secret`).toBeDefined();
      keySources.add(`${ref!.name}/${ref!.key}`);
      expect(d.spec!.template.spec!.containers[0]!.readinessProbe?.httpGet?.path, `${name}: readiness`).toBe('/ready');
    }
    expect(keySources.size, 'one FNTS_SECRET_KEY Secret for every API node').toBe(1);
    // The LB dials one Service, which selects the pods of every API Deployment on their HTTP port.
    const api = new URL(compileConfig(env('fnts-lb'), dir).fleet.runnerApiUrl!);
    for (const d of apis) expect(serviceTo(api.hostname, Number(api.port || 80), d), d.metadata!.name).toBe(compileConfig(env(d.metadata!.name!), dir).port);
  });

  it("keeps Postgres's files on a PersistentVolumeClaim", () => {
    const db = statefulSets.find((s) => s.metadata?.name === 'fnts-db')!;
    const claims = (db.spec!.volumeClaimTemplates ?? []).map((c) => c.metadata!.name);
    const mount = db.spec!.template.spec!.containers[0]!.volumeMounts?.find((m) => m.mountPath === '/var/lib/postgresql/data');
    expect(mount, 'a volume at /var/lib/postgresql/data').toBeDefined();
    expect(claims).toContain(mount!.name);
    // PGDATA, when set, is on it.
    const pgdata = containerEnv(db.spec!.template.spec!.containers[0]!)['PGDATA'] ?? mount!.mountPath;
    expect(pgdata.startsWith(mount!.mountPath)).toBe(true);
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
