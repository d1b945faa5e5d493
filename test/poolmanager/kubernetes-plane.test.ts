/**
 * The kubernetes control plane (through @kubernetes/client-node) against
 * API exchanges (recordings/kubernetes.json) replayed in order by a local
 * HTTP server that checks each request's method, path, content type, bearer
 * token and the listed body fields. The exchanges were WRITTEN BY HAND from
 * the Kubernetes API reference, not recorded from a cluster (none can run
 * here): this shows the plane speaks the API as documented, not that a
 * real API server answers as written. What a cluster would do between the
 * exchanges is not tested.
 */
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { createServer, type Server } from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ControlPlaneError } from '../../src/poolmanager/index.js';
import { KubernetesPlane } from '../../src/poolmanager/planes/kubernetes.js';

interface Exchange {
  name: string;
  method: string;
  path: string;
  status: number;
  contentType?: string;
  match?: unknown;
  response: unknown;
}

const { exchanges } = JSON.parse(readFileSync(new URL('./recordings/kubernetes.json', import.meta.url), 'utf8')) as { exchanges: Exchange[] };

/** Whether `actual` has every field of `expected` (recursively). */
function contains(actual: unknown, expected: unknown): boolean {
  if (expected === null || typeof expected !== 'object') return actual === expected;
  if (actual === null || typeof actual !== 'object') return false;
  return Object.entries(expected).every(([k, v]) => contains((actual as Record<string, unknown>)[k], v));
}

describe('KubernetesPlane, replayed', () => {
  let server: Server;
  let plane: KubernetesPlane;
  let next = 0;
  const mismatches: string[] = [];
  const dir = mkdtempSync(join(tmpdir(), 'fnts-k8s-'));
  const tokenFile = join(dir, 'token');
  writeFileSync(tokenFile, 'recorded-token');

  beforeAll(async () => {
    server = createServer((req, res) => {
      let body = '';
      req.on('data', (c: Buffer) => (body += c.toString()));
      req.on('end', () => {
        const want = exchanges[next++];
        const problems: string[] = [];
        if (!want) problems.push('no more exchanges recorded');
        else {
          if (req.method !== want.method || req.url !== want.path) problems.push(`expected ${want.method} ${want.path}, got ${req.method} ${req.url}`);
          if (req.headers.authorization !== 'Bearer recorded-token') problems.push(`no bearer token (${req.headers.authorization})`);
          if (want.contentType && req.headers['content-type'] !== want.contentType) problems.push(`content type ${req.headers['content-type']}, expected ${want.contentType}`);
          if (want.match && !contains(JSON.parse(body || 'null'), want.match)) problems.push(`body ${body} lacks ${JSON.stringify(want.match)}`);
        }
        if (problems.length > 0) {
          mismatches.push(`${want?.name ?? '(end)'}: ${problems.join('; ')}`);
          res.writeHead(500).end(JSON.stringify({ message: problems.join('; ') }));
          return;
        }
        res.writeHead(want!.status, { 'content-type': 'application/json' }).end(JSON.stringify(want!.response));
      });
    });
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    const { port } = server.address() as { port: number };
    plane = new KubernetesPlane({ apiUrl: `http://127.0.0.1:${port}`, namespace: 'fn', tokenFile, image: 'fnts/fnts:0.1.0', manager: 'fnts', runnerMemMb: 4096, tlsSecret: 'fnts-poolmanager-tls' });
  });

  afterAll(async () => {
    await new Promise((resolve) => server.close(resolve));
    rmSync(dir, { recursive: true, force: true });
  });

  it("creates a group's Deployment, scales it, removes the pod it names, and lists running pods by their IPs", async () => {
    expect(await plane.runners('default')).toEqual([]);
    expect(await plane.provision('default', 2)).toBe(2);
    expect(await plane.runners('default')).toEqual([
      { id: 'fnts-runners-default-7d9c5b6f4-x2kqp', address: '10.244.1.17:9190', createdAt: Date.parse('2025-11-24T10:00:01Z') },
      { id: 'fnts-runners-default-7d9c5b6f4-9jz4m', address: undefined, createdAt: Date.parse('2025-11-24T10:00:02Z') },
    ]);
    expect(await plane.provision('default', 1)).toBe(1);
    await plane.remove('default', 'fnts-runners-default-7d9c5b6f4-x2kqp');
    // A terminating pod is no runner any more.
    expect((await plane.runners('default')).map((r) => r.address)).toEqual(['10.244.2.9:9190', '10.244.1.18:9190']);
    await plane.remove('default', 'fnts-runners-default-gone');
    expect(mismatches).toEqual([]);
  });

  it('says which permission is missing when the API refuses', async () => {
    const err = await plane.runners('batch').then(
      () => undefined,
      (e: unknown) => e,
    );
    expect(err).toBeInstanceOf(ControlPlaneError);
    expect((err as Error).message).toMatch(/refused GET .* \(403: pods is forbidden.*\); give the manager's service account the Role in deploy\/kubernetes/);
    expect(mismatches).toEqual([]);
    expect(next).toBe(exchanges.length);
  });

  type Container = { name: string; env?: Array<{ name: string; value: string }>; volumeMounts: Array<{ name: string; mountPath: string; readOnly?: boolean }> };
  type Spec = { spec: { template: { spec: { containers: Container[]; volumes: Array<{ name: string; secret?: { secretName: string; defaultMode: number } }> } } } };
  const specOf = (p: KubernetesPlane): Spec => (p as unknown as { spec(g: string, n: number): Spec }).spec('default', 1);

  it('puts a Docker engine beside each runner, sharing the socket folder at the same path', () => {
    const [runner, engine] = specOf(plane).spec.template.spec.containers;
    expect(runner!.env).toEqual(
      expect.arrayContaining([
        { name: 'FN_NODE_TYPE', value: 'pure-runner' },
        { name: 'FN_IOFS_PATH', value: '/iofs' },
        { name: 'DOCKER_HOST', value: 'unix:///var/run/dind/docker.sock' },
      ]),
    );
    expect(engine!.volumeMounts).toEqual(runner!.volumeMounts.filter((m) => m.name !== 'tls'));
  });

  it("serves each runner's port with the TLS Secret, mounted read-only in the runner alone, the key never in the spec", () => {
    const { containers, volumes } = specOf(plane).spec.template.spec;
    const [runner, engine] = containers;
    expect(runner!.env).toEqual(
      expect.arrayContaining([
        { name: 'FNTS_GRPC_TLS_CERT', value: '/run/fnts/tls/tls.crt' },
        { name: 'FNTS_GRPC_TLS_KEY', value: '/run/fnts/tls/tls.key' },
        { name: 'FNTS_GRPC_TLS_CA', value: '/run/fnts/tls/ca.crt' },
      ]),
    );
    expect(runner!.env!.map((e) => e.name)).not.toContain('FNTS_GRPC_INSECURE');
    expect(runner!.volumeMounts).toContainEqual({ name: 'tls', mountPath: '/run/fnts/tls', readOnly: true });
    expect(engine!.volumeMounts.map((m) => m.name)).not.toContain('tls');
    expect(volumes).toContainEqual({ name: 'tls', secret: { secretName: 'fnts-poolmanager-tls', defaultMode: 0o400 } });
    expect(JSON.stringify(specOf(plane))).not.toMatch(/PRIVATE KEY/);
    // Without a Secret, runners are plaintext pods: said explicitly, as compileConfig allows it only with FNTS_GRPC_INSECURE=true.
    const plain = new KubernetesPlane({ apiUrl: 'http://127.0.0.1:1', namespace: 'fn', tokenFile, image: 'fnts/fnts:0.1.0', manager: 'fnts', runnerMemMb: 4096 });
    const plainRunner = specOf(plain).spec.template.spec.containers[0]!;
    expect(plainRunner.env).toContainEqual({ name: 'FNTS_GRPC_INSECURE', value: 'true' });
    expect(plainRunner.env!.map((e) => e.name)).not.toContain('FNTS_GRPC_TLS_CERT');
    expect(specOf(plain).spec.template.spec.volumes.map((v) => v.name)).toEqual(['iofs', 'dind']);
  });
});
