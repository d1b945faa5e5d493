/**
 * The managed fleet's manifests (deploy/swarm, deploy/kubernetes) start the
 * roles they say: every service's environment is one fnts accepts
 * (compileConfig, as the process would at start), the LB finds the pool
 * manager where it listens, and the manager's Kubernetes Role allows what
 * the kubernetes plane asks of the API.
 */
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { loadAllYaml, loadYaml, type V1Deployment, type V1Role, type V1Service } from '@kubernetes/client-node';
import { afterAll, describe, expect, it } from 'vitest';
import { compileConfig } from '../../src/config/index.js';

const dir = mkdtempSync(join(tmpdir(), 'fnts-manifests-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));
const file = (path: string): string => readFileSync(new URL(`../../${path}`, import.meta.url), 'utf8');

describe('deploy/swarm/fnts-stack.yml', () => {
  // Compose's ${VAR:-default}, as `docker stack deploy` fills it in with nothing set.
  const stack = loadYaml<{ services: Record<string, { environment?: Record<string, string> }> }>(file('deploy/swarm/fnts-stack.yml').replace(/\$\{[A-Z_]+:-([^}]*)\}/g, '$1'));
  const env = (service: string): Record<string, string> => stack.services[service]?.environment ?? {};

  it('has an API node, an LB and a pool manager on the swarm plane, each with settings fnts takes', () => {
    expect(Object.keys(stack.services).sort()).toEqual(['api', 'lb', 'poolmanager']);
    for (const name of Object.keys(stack.services)) expect(() => compileConfig(env(name), dir), name).not.toThrow();
    expect(compileConfig(env('poolmanager'), dir).pool).toMatchObject({ controlPlane: 'swarm' });
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
    const pairs = d.spec!.template.spec!.containers[0]!.env ?? [];
    // In a pod, Kubernetes sets where its API server is.
    return { KUBERNETES_SERVICE_HOST: '10.96.0.1', KUBERNETES_SERVICE_PORT: '443', ...Object.fromEntries(pairs.map((e) => [e.name, e.value ?? ''])) };
  };

  it('has Deployments of an API node, an LB and a pool manager on the kubernetes plane, each with settings fnts takes', () => {
    expect(deployments.map((d) => d.metadata!.name).sort()).toEqual(['fnts-api', 'fnts-lb', 'fnts-poolmanager']);
    for (const d of deployments) expect(() => compileConfig(env(d.metadata!.name!), dir), d.metadata!.name).not.toThrow();
    expect(compileConfig(env('fnts-poolmanager'), dir).pool.controlPlane).toBe('kubernetes');
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
