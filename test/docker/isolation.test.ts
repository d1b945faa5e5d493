/**
 * Functions fenced off from the platform (src/drivers/docker/network.ts),
 * seen from inside real function containers: a `netprobe` function tries
 * connections and reports how each ended, on full nodes listening on every
 * address (FN_LISTEN_HOST=0.0.0.0, as by default), so that only the fence
 * stands between a function and the server's port.
 *
 * Each test uses a network of its own (FNTS_FUNCTION_NETWORK_NAME), so that
 * the packet counters of its rules count its own functions only (other test
 * files' servers share the default network). Blocked attempts must fail at
 * once (REJECT: EHOSTUNREACH) and show in the REJECT rules' counters; a
 * public-shaped address (TEST-NET-3) must pass the fence: counted by its
 * last rule ("allowed"), by no REJECT (whether anything answers out there
 * is the internet's business, not the rules').
 */
import { execFileSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { hostname, tmpdir } from 'node:os';
import { join } from 'node:path';
import { createServer, type Server } from 'node:net';
import { pino, type Logger } from 'pino';
import { afterEach, beforeAll, describe, expect, it } from 'vitest';
import { fenceChains, USERS_CHAIN } from '../../src/drivers/index.js';
import { containersOfFn, containersOfOwner } from '../support/containers.js';
import { NETPROBE_PORT, netprobeImage } from '../support/functions.js';
import { docker } from '../support/images.js';
import { startFnts } from '../support/process.js';
import { caller, poster, startTestServer, type TestServer } from '../support/server.js';
import { eventually } from '../support/wait.js';

const run = randomBytes(3).toString('hex');
/** A public-shaped address outside this host (TEST-NET-3): the fence must let it through. */
const PUBLIC = '203.0.113.7';
/** This host's first IPv4 nameserver, if it has one: the engine's DNS forwards to it from the containers. */
const nameserver = /^\s*nameserver\s+(\d+\.\d+\.\d+\.\d+)\s*$/m.exec(readFileSync('/etc/resolv.conf', 'utf8'))?.[1];

let image: string;
const servers: TestServer[] = [];
const listeners: Server[] = [];

beforeAll(async () => {
  image = await netprobeImage();
});

afterEach(async () => {
  await Promise.all(servers.splice(0).map((s) => s.close()));
  await Promise.all(listeners.splice(0).map((l) => new Promise((r) => l.close(r))));
});

/** A full node on every address, its idle containers never paused (a paused peer would not answer at all). */
async function server(env: Record<string, string>, logger?: Logger): Promise<TestServer> {
  const s = await startTestServer({ FN_LISTEN_HOST: '0.0.0.0', FN_FREEZE_IDLE_MSECS: '-1', ...env }, logger);
  servers.push(s);
  return s;
}

/** A TCP port of this host on every address, as Redis, a database or a gRPC port would be. */
async function hostPort(): Promise<number> {
  // A probe closes at once: a reset is no fault of this listener's.
  const l = createServer((s) => s.on('error', () => undefined).end('host\n'));
  listeners.push(l);
  await new Promise<void>((r) => l.listen(0, '0.0.0.0', r));
  return (l.address() as { port: number }).port;
}

interface Probe {
  self: { address: string; gateway: string; ipv6: string };
  connects: Array<{ host: string; port: number; outcome: string; ms: number }>;
  lookups: Array<{ name: string; outcome: string; ms: number }>;
}

async function probe(s: TestServer, fnId: string, cmd: Record<string, unknown>): Promise<Probe> {
  const res = await s.invoke(fnId, cmd);
  expect(res.status, res.text).toBe(200);
  return res.json as Probe;
}

interface Counter {
  pkts: number;
  target: string;
  destination: string;
  comment: string;
}

/** A chain's rules with their packet counters (iptables -L -v -x -n). */
function counters(chain: string): Counter[] {
  return execFileSync('iptables', ['-w', '-L', chain, '-v', '-x', '-n'], { encoding: 'utf8' })
    .split('\n')
    .slice(2)
    .filter((l) => l.trim() !== '')
    .map((l) => {
      const f = l.trim().split(/\s+/);
      return { pkts: Number(f[0]), target: f[2]!, destination: f[8]!, comment: /\/\* (.*?) \*\//.exec(l)?.[1] ?? '' };
    });
}

const rejected = (chain: string): number => counters(chain).reduce((n, c) => n + (c.target === 'REJECT' ? c.pkts : 0), 0);

/** The fence chains of network `name` as it is now. */
async function chainsOf(name: string): Promise<{ input: string; forward: string; id: string }> {
  const id = ((await docker().getNetwork(name).inspect()) as { Id: string }).Id;
  return { ...fenceChains(id), id };
}

function rules(): string {
  return execFileSync('iptables', ['-w', '-S'], { encoding: 'utf8' });
}

async function networkExists(name: string): Promise<boolean> {
  return docker()
    .getNetwork(name)
    .inspect()
    .then(
      () => true,
      () => false,
    );
}

describe('function network isolation', () => {
  it("a function cannot reach this host's ports, another function or link-local addresses, and fails at once; a public address passes the fence; names still resolve", async () => {
    const net = `fnts-it-${run}-a`;
    // The nameserver's own address blocked too: DNS must still get through to it.
    const s = await server({ FNTS_FUNCTION_NETWORK_NAME: net, ...(nameserver ? { FNTS_FUNCTION_NETWORK_BLOCK: `default,${nameserver}/32` } : {}) });
    const port = await hostPort();
    const app = await s.app();
    const [a, b] = [await s.fn(app, image), await s.fn(app, image)];
    const peer = (await probe(s, b.id, {})).self;
    const { input, forward } = await chainsOf(net);

    const seen = await probe(s, a.id, {
      connect: [
        { host: 'gateway', port: s.server.port },
        { host: 'gateway', port },
        { host: peer.address, port: NETPROBE_PORT },
        { host: '169.254.169.254', port: 80 },
      ],
      lookup: [`fnts-isolation-${run}.invalid`],
    });
    expect(seen.self.gateway).toBe(peer.gateway);
    expect(seen.self.ipv6).not.toBe('on');
    for (const c of seen.connects) {
      expect(c.outcome, `${c.host}:${c.port}`).toBe('EHOSTUNREACH');
      expect(c.ms, `${c.host}:${c.port}`).toBeLessThan(1000);
    }
    // The resolver answered (NXDOMAIN), quickly: not refused, not timed out.
    if (nameserver) expect(seen.lookups[0]).toMatchObject({ outcome: 'ENOTFOUND' });
    expect(seen.lookups[0]!.ms).toBeLessThan(2000);
    // Each blocked attempt hit a REJECT: two on the host (INPUT), the peer and the metadata address beyond it.
    expect(counters(input).find((c) => c.comment === 'fnts: functions may not reach this host')!.pkts).toBeGreaterThanOrEqual(2);
    const fwd = counters(forward);
    expect(fwd.find((c) => c.comment === 'fnts: functions may not reach other functions')!.pkts).toBeGreaterThanOrEqual(1);
    expect(fwd.find((c) => c.comment === 'fnts: blocked range' && c.destination === '169.254.0.0/16')!.pkts).toBeGreaterThanOrEqual(1);

    const before = { input: rejected(input), forward: rejected(forward), allowed: counters(forward).find((c) => c.comment === 'fnts: allowed')!.pkts };
    await probe(s, a.id, { connect: [{ host: PUBLIC, port: 80 }], timeoutMs: 1000 });
    expect({ input: rejected(input), forward: rejected(forward) }).toEqual({ input: before.input, forward: before.forward });
    expect(counters(forward).find((c) => c.comment === 'fnts: allowed')!.pkts).toBeGreaterThan(before.allowed);

    expect((await s.call('/ready', { method: 'GET' })).json).toEqual({ status: 'ready', checks: { datastore: 'ok', docker: 'ok', network: 'ok' } });
    // The last server out removes the network and its fence, and its name from the users' chain.
    await servers.pop()!.close();
    expect(await networkExists(net)).toBe(false);
    expect(rules()).not.toContain(input);
    expect(rules()).not.toContain(forward);
    expect(rules()).not.toContain(`fnts: ${net} used by`);
  });

  it("FNTS_FUNCTION_NETWORK=open keeps Docker's bridge: the same function reaches this host's ports and another function, and /ready asks nothing of the network", async () => {
    const s = await server({ FNTS_FUNCTION_NETWORK: 'open' });
    const port = await hostPort();
    const app = await s.app();
    const [a, b] = [await s.fn(app, image), await s.fn(app, image)];
    const peer = (await probe(s, b.id, {})).self;
    const seen = await probe(s, a.id, {
      connect: [
        { host: 'gateway', port: s.server.port },
        { host: 'gateway', port },
        { host: peer.address, port: NETPROBE_PORT },
      ],
    });
    expect(seen.connects.map((c) => c.outcome)).toEqual(['connected', 'connected', 'connected']);
    expect(Object.keys((await s.containers())[0]!.NetworkSettings.Networks)).toEqual(['bridge']);
    expect((await s.call('/ready', { method: 'GET' })).json.checks).toEqual({ datastore: 'ok', docker: 'ok' });
  });

  it("FN_DOCKER_NETWORKS: functions join the operator's network, fnts adds no rules and says so at start", async () => {
    const own = `fnts-it-${run}-operator`;
    const made = (await docker().createNetwork({ Name: own, Driver: 'bridge' })) as { id: string };
    try {
      const lines: string[] = [];
      const logger = pino({ level: 'info' }, { write: (l: string) => lines.push(l) });
      const s = await server({ FN_DOCKER_NETWORKS: own }, logger);
      const fn = await s.fn(await s.app(), image);
      await probe(s, fn.id, {});
      expect(Object.keys((await s.containers())[0]!.NetworkSettings.Networks)).toEqual([own]);
      expect(rules()).not.toContain(fenceChains(made.id).forward);
      expect(lines.join('')).toContain(`functions join ${own} (FN_DOCKER_NETWORKS): fnts adds no network rules`);
      expect((await s.call('/ready', { method: 'GET' })).json.checks).toEqual({ datastore: 'ok', docker: 'ok' });
      await servers.pop()!.close();
    } finally {
      await docker().getNetwork(made.id).remove();
    }
  });

  it('servers on one engine share the network: one stopping leaves the other fenced; a network removed under a server is made again, fence first; fences of networks gone and names of dead servers are cleared; the last one out removes it all', async () => {
    const net = `fnts-it-${run}-b`;
    // What a server killed after removing a network but before its fence would leave: a fence of no network.
    const orphan = fenceChains('0000deadbeef0000');
    execFileSync('iptables', ['-w', '-N', orphan.input]);
    execFileSync('iptables', ['-w', '-A', orphan.input, '-j', 'REJECT']);
    execFileSync('iptables', ['-w', '-I', 'INPUT', '-i', 'fnts-nothere', '-j', orphan.input]);
    const s1 = await server({ FNTS_FUNCTION_NETWORK_NAME: net });
    const s2 = await server({ FNTS_FUNCTION_NETWORK_NAME: net });
    // And the name of a server killed while it used the network (no process has pid 2^22 + 1).
    expect(rules()).toContain(`-N ${USERS_CHAIN}`);
    execFileSync('iptables', ['-w', '-A', USERS_CHAIN, '-m', 'comment', '--comment', `fnts: ${net} used by ${hostname()}/4194305/1`]);
    const port = await hostPort();

    const f1 = await s1.fn(await s1.app(), image);
    expect((await probe(s1, f1.id, { connect: [{ host: 'gateway', port }] })).connects[0]!.outcome).toBe('EHOSTUNREACH');
    expect(rules()).not.toContain(orphan.input);
    const first = await chainsOf(net);

    // s2 has no container yet: s1's stop leaves the network (s2 uses it) and its fence.
    await s1.close();
    servers.splice(servers.indexOf(s1), 1);
    expect(await networkExists(net)).toBe(true);
    expect(rules()).toContain(`-j ${first.forward}`);

    // Another server removes the network meanwhile (nothing is attached): s2's next container makes it again, fenced.
    await docker().getNetwork(net).remove();
    const f2 = await s2.fn(await s2.app(), image);
    const seen = await probe(s2, f2.id, {
      connect: [
        { host: 'gateway', port: s2.server.port },
        { host: 'gateway', port },
      ],
    });
    expect(seen.connects.map((c) => c.outcome)).toEqual(['EHOSTUNREACH', 'EHOSTUNREACH']);
    const second = await chainsOf(net);
    expect(second.id).not.toBe(first.id);
    expect(rules()).toContain(`-j ${second.input}`);
    // The first network's fence went with it (swept: its network is gone).
    expect(rules()).not.toContain(first.forward);

    // The last one out: its containers, then the network and its fence; the dead server's name with its own.
    expect(await s2.containers()).toHaveLength(1);
    await s2.close();
    servers.splice(servers.indexOf(s2), 1);
    expect(await containersOfOwner(s2.config.agent.owner)).toEqual([]);
    expect(await networkExists(net)).toBe(false);
    expect(rules()).not.toContain(second.input);
    expect(rules()).not.toContain(`fnts: ${net} used by`);
  });

  it("without iptables the server starts, warns once, runs functions on Docker's bridge, and /ready says the fence is missing and why", async () => {
    const dir = mkdtempSync(join(tmpdir(), 'fnts-it-'));
    // No iptables on the PATH: what a host without it, or a server without the rights to it, looks like.
    const p = await startFnts({ PATH: '/nonexistent', FN_DB_URL: `sqlite3://${dir}/fn.db`, FN_IOFS_PATH: `/tmp/fnts-it/${run}-c`, FNTS_FUNCTION_NETWORK_NAME: `fnts-it-${run}-c` });
    try {
      const call = caller(p.url);
      const post = poster(call);
      const fn = await post('/v2/fns', { app_id: (await post('/v2/apps', { name: 'noipt' })).id, name: 'probe', image });
      const res = await call(`/invoke/${fn.id}`, { body: {}, headers: { 'content-type': 'application/json' } });
      expect(res.status, res.text).toBe(200);
      expect(Object.keys((await containersOfFn(fn.id))[0]!.NetworkSettings.Networks)).toEqual(['bridge']);
      const ready = await fetch(`${p.url}/ready`);
      expect(ready.status).toBe(503);
      const body = (await ready.json()) as { checks: Record<string, string> };
      expect(body.checks['docker']).toBe('ok');
      expect(body.checks['network']).toMatch(/^functions are not fenced off from this host: iptables is not installed here: run fnts as root on the Docker engine's host/);
      expect(await eventually(() => (p.output().match(/functions are not fenced off from this host and its networks/g) ?? []).length === 1, 5000)).toBe(true);
      expect((await fetch(`${p.url}/ready`)).status).toBe(503);
      expect(p.output().match(/functions are not fenced off from this host and its networks/g)).toHaveLength(1);
      expect(await networkExists(`fnts-it-${run}-c`)).toBe(false);
    } finally {
      expect(await p.stop()).toBe(0);
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
