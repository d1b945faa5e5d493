/**
 * Mutual TLS between an LB and a pure runner (FNTS_GRPC_TLS_CERT, _KEY, _CA),
 * with certificates `fnts certs` makes, as an operator would: with the
 * certificates on both sides calls run; an LB without them, or with a
 * certificate another CA signed, cannot reach the runner, and its callers
 * hear 503 rather than hang. A runner whose certificate does not carry the
 * address it is dialled at is reached by the name it carries
 * (FNTS_GRPC_TLS_RUNNER_NAME). An LB with a pool manager (FN_NPM_ADDRESS)
 * reaches the manager with the same certificates. And a runner refuses to
 * start in plaintext where the network reaches it.
 */
import { mkdtempSync, readFileSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import * as grpc from '@grpc/grpc-js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { dockerReachable, ensureFunctionImage, HELLO_FUNC_JS } from '../support/images.js';
import { runFnts } from '../support/process.js';
import { startTestServer, type TestServer } from '../support/server.js';
import { eventually } from '../support/wait.js';
import { StandInManager } from './fixtures/stand-in-npm.js';

const docker = await dockerReachable();

/** Runs `fnts certs` (the real binary) with `args`; answers its exit code and output. */
async function certs(...args: string[]): Promise<{ code: number | null; output: string }> {
  return runFnts(['certs', ...args], {}).done;
}

/** The FNTS_GRPC_TLS_* of node `name` in `dir`, as `fnts certs` names its files. */
const tlsOf = (dir: string, name: string): Record<string, string> => ({
  FNTS_GRPC_TLS_CERT: join(dir, `${name}.crt`),
  FNTS_GRPC_TLS_KEY: join(dir, `${name}.key`),
  FNTS_GRPC_TLS_CA: join(dir, 'ca.crt'),
});

describe('fnts certs', () => {
  const dir = mkdtempSync(join(tmpdir(), 'fnts-certs-'));
  afterAll(() => rmSync(dir, { recursive: true, force: true }));

  it('makes a CA and a key and certificate per node, keys 0600, a line per file, and says what to set', async () => {
    const out = join(dir, 'fleet');
    const { code, output } = await certs('--out', out, '--names', 'lb,runner-1', '--hosts', 'runner-1.internal,10.0.0.5');
    expect(code, output).toBe(0);
    for (const file of ['ca.key', 'ca.crt', 'lb.key', 'lb.crt', 'runner-1.key', 'runner-1.crt']) expect(output).toContain(`wrote ${join(out, file)}`);
    for (const key of ['ca.key', 'lb.key', 'runner-1.key']) expect(statSync(join(out, key)).mode & 0o777).toBe(0o600);
    expect(output).toContain(`runner-1: FNTS_GRPC_TLS_CERT=${join(out, 'runner-1.crt')} FNTS_GRPC_TLS_KEY=${join(out, 'runner-1.key')} FNTS_GRPC_TLS_CA=${join(out, 'ca.crt')}`);
    // The certificate carries its name and the hosts, for both ends of a connection, signed by the CA.
    const { X509Certificate } = await import('node:crypto');
    const cert = new X509Certificate(readFileSync(join(out, 'runner-1.crt')));
    const ca = new X509Certificate(readFileSync(join(out, 'ca.crt')));
    expect(cert.subjectAltName).toBe('DNS:runner-1, DNS:runner-1.internal, IP Address:10.0.0.5');
    expect(cert.keyUsage).toEqual(expect.arrayContaining(['1.3.6.1.5.5.7.3.1', '1.3.6.1.5.5.7.3.2']));
    expect(cert.verify(ca.publicKey)).toBe(true);
    expect(ca.ca).toBe(true);

    // Later nodes are signed by the same CA; a node's files are never overwritten.
    const more = await certs('--out', out, '--names', 'runner-2');
    expect(more.code, more.output).toBe(0);
    expect(more.output).toContain(`signing with the CA in ${join(out, 'ca.crt')}`);
    expect(new X509Certificate(readFileSync(join(out, 'runner-2.crt'))).verify(ca.publicKey)).toBe(true);
    const again = await certs('--out', out, '--names', 'runner-2');
    expect(again.code).toBe(2);
    expect(again.output).toContain(`fnts: ${join(out, 'runner-2.crt')} exists already; remove runner-2's files to make them again, or give another --out`);
  });

  it('refuses a name that cannot be a DNS name, saying what to use', async () => {
    const { code, output } = await certs('--out', join(dir, 'bad'), '--names', 'lb,Runner One');
    expect(code).toBe(2);
    expect(output).toContain("fnts: --names has 'Runner One', which is not a DNS name");
  });
});

describe.skipIf(!docker)('mutual TLS between LB and runner, with certificates fnts certs made', () => {
  const dir = mkdtempSync(join(tmpdir(), 'fnts-tls-'));
  const fleet = join(dir, 'fleet');
  const other = join(dir, 'other');
  let api: TestServer;
  let runner: TestServer;
  let unnamed: TestServer;
  const lbs: TestServer[] = [];
  let hello: string;

  beforeAll(async () => {
    hello = await ensureFunctionImage('hello', HELLO_FUNC_JS);
    // The fleet's CA with an LB and a runner dialled at 127.0.0.1; a runner whose certificate carries only its name; another CA's LB.
    for (const [out, names, hosts] of [
      [fleet, 'lb,runner', '127.0.0.1'],
      [fleet, 'hidden-runner', ''],
      [other, 'lb', '127.0.0.1'],
    ] as const) {
      const made = await certs('--out', out, '--names', names, ...(hosts ? ['--hosts', hosts] : []));
      expect(made.code, made.output).toBe(0);
    }
    [api, runner, unnamed] = await Promise.all([
      startTestServer({ FN_NODE_TYPE: 'api' }),
      startTestServer({ FN_NODE_TYPE: 'pure-runner', FN_GRPC_PORT: '0', ...tlsOf(fleet, 'runner') }),
      startTestServer({ FN_NODE_TYPE: 'pure-runner', FN_GRPC_PORT: '0', ...tlsOf(fleet, 'hidden-runner') }),
    ]);
  });

  afterAll(async () => {
    await Promise.all(lbs.map((lb) => lb.close()));
    await Promise.all([runner?.close(), unnamed?.close()]);
    await api?.close();
    rmSync(dir, { recursive: true, force: true });
  });

  const lbWith = async (env: Record<string, string>, to: TestServer = runner): Promise<TestServer> => {
    const lb = await startTestServer({ FN_NODE_TYPE: 'lb', FN_RUNNER_API_URL: api.url, ...(env.FN_NPM_ADDRESS ? {} : { FN_RUNNER_ADDRESSES: `127.0.0.1:${to.server.grpcPort}` }), ...env });
    lbs.push(lb);
    return lb;
  };

  it('runs calls when both ends have certificates from the same CA', async () => {
    const lb = await lbWith(tlsOf(fleet, 'lb'));
    const fn = await api.fn(await api.app(), hello);
    const res = await lb.invoke(fn.id, { name: 'tls' });
    expect(res.status).toBe(200);
    expect(res.json).toEqual({ message: 'Hello tls' });
  });

  it.each<[string, () => Record<string, string>, RegExp]>([
    // Plaintext to a TLS port: the runner drops the connection, which the LB takes for a busy runner until the fn's timeout.
    ['without a certificate', () => ({}), /^Timed out - server too busy$/],
    // The handshake fails both ways (neither trusts the other's CA): the LB knows at once that it reaches no runner.
    ['with a certificate another CA signed', () => tlsOf(other, 'lb'), /^no runner is reachable \(127\.0\.0\.1:\d+\)/],
  ])('keeps out an LB %s: its callers get 503 within the fn timeout', async (_what, env, message) => {
    const lb = await lbWith(env());
    const fn = await api.fn(await api.app(), hello, { timeout: 2 });
    const res = await lb.invoke(fn.id, { name: 'outsider' });
    expect(res.status).toBe(503);
    expect(res.json.message).toMatch(message);
    expect(res.ms).toBeLessThan(5000);
  });

  it('checks a runner against FNTS_GRPC_TLS_RUNNER_NAME when its certificate does not carry the address it is dialled at', async () => {
    const fn = await api.fn(await api.app(), hello, { timeout: 2 });
    // Dialled at 127.0.0.1, which its certificate does not name: refused.
    const strict = await lbWith(tlsOf(fleet, 'lb'), unnamed);
    expect((await strict.invoke(fn.id, { name: 'by address' })).json.message).toMatch(/^no runner is reachable/);
    // Checked against the name it carries: reached.
    const named = await lbWith({ ...tlsOf(fleet, 'lb'), FNTS_GRPC_TLS_RUNNER_NAME: 'hidden-runner' }, unnamed);
    const res = await named.invoke(fn.id, { name: 'by name' });
    expect(res.status, res.text).toBe(200);
    expect(res.json).toEqual({ message: 'Hello by name' });
    // A name it does not carry is refused as well.
    const wrong = await lbWith({ ...tlsOf(fleet, 'lb'), FNTS_GRPC_TLS_RUNNER_NAME: 'runner' }, unnamed);
    expect((await wrong.invoke(fn.id, { name: 'wrong name' })).json.message).toMatch(/^no runner is reachable/);
  });

  it('reaches a pool manager with the same certificates, and the runners it lists', async () => {
    const tls = tlsOf(fleet, 'lb');
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

describe('a fleet port in plaintext where the network reaches it', () => {
  it.each(['pure-runner', 'poolmanager'])('stops fnts in the %s role at start (exit 2), saying what to set', async (role) => {
    const { code, output } = await runFnts(['serve'], { FN_NODE_TYPE: role, FN_PORT: '0', FN_LISTEN_HOST: '127.0.0.1', FNTS_GRPC_LISTEN_HOST: '0.0.0.0' }).done;
    expect(code).toBe(2);
    expect(output).toMatch(
      /^fnts: FN_NODE_TYPE=\S+ would serve .* in plaintext on 0\.0\.0\.0 \(FNTS_GRPC_LISTEN_HOST\).*set FNTS_GRPC_TLS_CERT, FNTS_GRPC_TLS_KEY and FNTS_GRPC_TLS_CA .*or FNTS_GRPC_LISTEN_HOST=127\.0\.0\.1 .*or FNTS_GRPC_INSECURE=true/,
    );
  });
});
