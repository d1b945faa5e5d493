/**
 * Mutual TLS between an LB and a pure runner (FNTS_GRPC_TLS_CERT, _KEY, _CA):
 * with the certificates on both sides calls run; an LB without them cannot
 * reach the runner, and its callers hear 503 rather than hang. An LB with a
 * pool manager (FN_NPM_ADDRESS) reaches the manager with the same certificates.
 */
import { execFileSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import * as grpc from '@grpc/grpc-js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { dockerReachable, ensureFunctionImage, HELLO_FUNC_JS } from '../support/images.js';
import { startTestServer, type TestServer } from '../support/server.js';
import { eventually } from '../support/wait.js';
import { StandInManager } from './fixtures/stand-in-npm.js';

const docker = await dockerReachable();

/** A CA, and one certificate it signed for 127.0.0.1 good for both ends (server and client auth). */
function makeCertificates(dir: string): Record<string, string> {
  const ssl = (...args: string[]): void => void execFileSync('openssl', args, { cwd: dir, stdio: 'ignore' });
  ssl('req', '-x509', '-newkey', 'rsa:2048', '-nodes', '-days', '1', '-subj', '/CN=fnts test CA', '-keyout', 'ca.key', '-out', 'ca.pem');
  ssl('req', '-newkey', 'rsa:2048', '-nodes', '-subj', '/CN=127.0.0.1', '-keyout', 'node.key', '-out', 'node.csr');
  writeFileSync(join(dir, 'ext.cnf'), 'subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth,clientAuth\n');
  ssl('x509', '-req', '-in', 'node.csr', '-CA', 'ca.pem', '-CAkey', 'ca.key', '-CAcreateserial', '-days', '1', '-extfile', 'ext.cnf', '-out', 'node.pem');
  return { FNTS_GRPC_TLS_CERT: join(dir, 'node.pem'), FNTS_GRPC_TLS_KEY: join(dir, 'node.key'), FNTS_GRPC_TLS_CA: join(dir, 'ca.pem') };
}

describe.skipIf(!docker)('mutual TLS between LB and runner', () => {
  const dir = mkdtempSync(join(tmpdir(), 'fnts-tls-'));
  let tls: Record<string, string>;
  let api: TestServer;
  let runner: TestServer;
  const lbs: TestServer[] = [];
  let hello: string;

  beforeAll(async () => {
    tls = makeCertificates(dir);
    hello = await ensureFunctionImage('hello', HELLO_FUNC_JS);
    api = await startTestServer({ FN_NODE_TYPE: 'api' });
    runner = await startTestServer({ FN_NODE_TYPE: 'pure-runner', FN_GRPC_PORT: '0', ...tls });
  });

  afterAll(async () => {
    await Promise.all(lbs.map((lb) => lb.close()));
    await runner?.close();
    await api?.close();
    rmSync(dir, { recursive: true, force: true });
  });

  const lbWith = async (env: Record<string, string>): Promise<TestServer> => {
    const lb = await startTestServer({ FN_NODE_TYPE: 'lb', FN_RUNNER_API_URL: api.url, ...(env.FN_NPM_ADDRESS ? {} : { FN_RUNNER_ADDRESSES: `127.0.0.1:${runner.server.grpcPort}` }), ...env });
    lbs.push(lb);
    return lb;
  };

  it('runs calls when both ends have certificates from the same CA', async () => {
    const lb = await lbWith(tls);
    const fn = await api.fn(await api.app(), hello);
    const res = await lb.invoke(fn.id, { name: 'tls' });
    expect(res.status).toBe(200);
    expect(res.json).toEqual({ message: 'Hello tls' });
  });

  it('keeps out an LB without a certificate: its callers get 503 within the fn timeout', async () => {
    const lb = await lbWith({});
    const fn = await api.fn(await api.app(), hello, { timeout: 2 });
    const res = await lb.invoke(fn.id, { name: 'plain' });
    expect(res.status).toBe(503);
    expect(res.json).toEqual({ message: 'Timed out - server too busy' });
    expect(res.ms).toBeLessThan(5000);
  });

  it('reaches a pool manager with the same certificates, and the runners it lists', async () => {
    const manager = new StandInManager();
    await manager.start(
      grpc.ServerCredentials.createSsl(readFileSync(tls.FNTS_GRPC_TLS_CA!), [{ cert_chain: readFileSync(tls.FNTS_GRPC_TLS_CERT!), private_key: readFileSync(tls.FNTS_GRPC_TLS_KEY!) }], true),
    );
    try {
      manager.members.set('default', [`127.0.0.1:${runner.server.grpcPort}`]);
      const lb = await lbWith({ ...tls, FN_NPM_ADDRESS: `127.0.0.1:${manager.port}`, FNTS_NPM_POLL_MSECS: '100', FNTS_NPM_ADVERTISE_MSECS: '100' });
      const fn = await api.fn(await api.app(), hello);
      const res = await lb.invoke(fn.id, { name: 'managed' });
      expect(res.status).toBe(200);
      expect(res.json).toEqual({ message: 'Hello managed' });
      // And it tells the manager what the group needs, over the same TLS.
      expect(await eventually(() => manager.need('default') === 0, 5_000, 20)).toBe(true);
    } finally {
      manager.close();
    }
  });
});
