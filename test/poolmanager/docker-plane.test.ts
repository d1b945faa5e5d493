/**
 * The docker control plane against the contract, on the real engine: real
 * runner containers of the fnts image (npm run image:runner), each
 * answering RunnerProtocol.Status on its published port. Runner containers
 * carry the run's tag, so the run's leak check sees any left behind.
 *
 * Then what an operator meets: a runner image that is not built yet (the
 * manager says so once, not every tick), the engine named by DOCKER_HOST
 * (a unix socket at another path, a tcp address) used by the plane and
 * handed to its runners, and runners published on a range of host ports.
 */
import { execFileSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { mkdirSync, rmSync, writeFileSync } from 'node:fs';
import { createConnection, createServer, type Server } from 'node:net';
import { pino } from 'pino';
import { afterAll, describe, expect, it } from 'vitest';
import { TAG_LABEL } from '../../src/agent/index.js';
import type { EngineAddress } from '../../src/config/index.js';
import { CapacityBook, ControlPlaneError, PoolManager, RunnerStatus, conservative } from '../../src/poolmanager/index.js';
import { runControlPlaneContract } from '../../src/poolmanager/control-plane.contract.js';
import { DockerPlane, type DockerPlaneOptions } from '../../src/poolmanager/planes/docker.js';
import { docker, ensureRunnerImage } from '../support/images.js';
import { RUN_TAG_ENV } from '../support/tag.js';
import { eventually } from '../support/wait.js';

const image = await ensureRunnerImage();
const tag = process.env[RUN_TAG_ENV];
const iofsRoot = `/tmp/fnts-pool-${randomBytes(3).toString('hex')}`;

afterAll(() => rmSync(iofsRoot, { recursive: true, force: true }));

/** A plane of this run: its runners carry the run's tag, log little and stop within 10 s. */
function plane(extra: Partial<DockerPlaneOptions> = {}): DockerPlane {
  return new DockerPlane({
    image,
    manager: `test-${randomBytes(3).toString('hex')}`,
    iofsRoot,
    runnerMemMb: 256,
    runnerEnv: { FN_LOG_LEVEL: 'warn', ...(tag ? { [RUN_TAG_ENV]: tag } : {}) },
    labels: tag ? { [TAG_LABEL]: tag } : {},
    stopTimeoutS: 10,
    ...extra,
  });
}

runControlPlaneContract('docker', () => plane(), { live: true, startMs: 20_000 });

const status = new RunnerStatus();
/** Planes and groups whose runners are removed after the file. */
const made: Array<[DockerPlane, string]> = [];
afterAll(async () => {
  await Promise.all(made.map(async ([p, g]) => Promise.all((await p.runners(g).catch(() => [])).map((r) => p.remove(g, r.id).catch(() => undefined)))));
  status.close();
});

/** A new group on `p`, its runners removed after the file. */
function group(p: DockerPlane): string {
  const g = `op-${randomBytes(3).toString('hex')}`;
  made.push([p, g]);
  return g;
}

/** The group's runners once there are `n`, each with an address and answering Status. */
async function answering(p: DockerPlane, g: string, n: number): Promise<Array<{ id: string; address: string }>> {
  let up: Array<{ id: string; address: string }> = [];
  const ok = await eventually(
    async () => {
      const rs = await p.runners(g);
      if (rs.length !== n || rs.some((r) => r.address === undefined)) return false;
      const answers = await Promise.all(
        rs.map((r) =>
          status.probe(r.address!).then(
            () => true,
            () => false,
          ),
        ),
      );
      up = rs.map((r) => ({ id: r.id, address: r.address! }));
      return answers.every(Boolean);
    },
    30_000,
    200,
  );
  expect(ok, `${n} runner(s) of ${g} did not come up`).toBe(true);
  return up;
}

const inspect = (name: string) => docker().getContainer(name).inspect();

describe('a runner image that is not built', () => {
  it('is told once, in one line saying what to build, and once more when scaling works again', async () => {
    const missing = `fnts-test/runner-not-built:${randomBytes(4).toString('hex')}`;
    const p = plane({ image: missing });
    const g = group(p);
    const lines: Array<Record<string, unknown>> = [];
    const log = pino({ level: 'info' }, { write: (line: string) => void lines.push(JSON.parse(line) as Record<string, unknown>) });
    const book = new CapacityBook({ ttlMs: 60_000 });
    const manager = new PoolManager({
      plane: p,
      book,
      predictor: conservative,
      probe: status.probe,
      log,
      runnerMemMb: 256,
      minRunners: 1,
      maxRunners: 1,
      maxProvisionPerTick: 1,
      tickMs: 1000,
      leadMs: 0,
      drainGraceMs: 0,
      maxDrainMs: 60_000,
      startTimeoutMs: 60_000,
    });
    book.touch(g);
    try {
      // Five ticks: five seconds of a manager whose image is missing.
      for (let i = 0; i < 5; i++) await manager.tick();
      const errors = lines.filter((l) => l['level'] === 50);
      expect(errors).toHaveLength(1);
      expect(errors[0]!['msg']).toMatch(new RegExp(`runner group ${g} fails: the runner image ${missing} is not on the engine .*; build it with npm run image:runner`));
      expect(errors[0]!['err']).toBeUndefined();
      expect(await p.runners(g)).toEqual([]);

      execFileSync('docker', ['tag', image, missing]);
      await manager.tick();
      expect(lines.filter((l) => l['level'] === 50)).toHaveLength(1);
      expect(lines.filter((l) => String(l['msg']).includes(`runner group ${g} works again`))).toHaveLength(1);
      expect(await p.runners(g)).toHaveLength(1);
    } finally {
      // Its runner goes with the file's others (afterAll), by when it is up and stops at once.
      await manager.close();
      execFileSync('docker', ['image', 'rm', missing], { stdio: 'ignore' });
    }
  });
});

describe('DOCKER_HOST', () => {
  it('a unix socket at another path: the plane talks to it and mounts it into its runners', async () => {
    const dir = `/tmp/fnts-engine-${randomBytes(3).toString('hex')}`;
    const socket = `${dir}/docker.sock`;
    mkdirSync(dir);
    writeFileSync(socket, '');
    // The engine's socket, reachable at this path only for this test.
    execFileSync('mount', ['--bind', '/var/run/docker.sock', socket]);
    try {
      const p = plane({ engine: { kind: 'unix', path: socket } });
      const g = group(p);
      expect(await p.provision(g, 1)).toBe(1);
      const [runner] = await answering(p, g, 1);
      const mounts = (await inspect(runner!.id)).Mounts.map((m) => `${m.Source}:${m.Destination}`);
      expect(mounts).toContain(`${socket}:/var/run/docker.sock`);
      expect(mounts).not.toContain('/var/run/docker.sock:/var/run/docker.sock');
      await p.remove(g, runner!.id);

      // Nothing there: the plane says which engine it could not reach, it does not fall back to another.
      const none = plane({ engine: { kind: 'unix', path: `${dir}/none.sock` } });
      const err = await none.runners(g).then(
        () => undefined,
        (e: unknown) => e,
      );
      expect(err).toBeInstanceOf(ControlPlaneError);
      expect((err as Error).message).toContain(`the Docker engine at unix://${dir}/none.sock could not list the runners`);
    } finally {
      execFileSync('umount', [socket]);
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it('a tcp address: the plane dials it and its runners get it as their DOCKER_HOST, with no socket mounted', async () => {
    // The host's address on the engine's default bridge (node lists docker0 only while a container is attached to it).
    const gateway = /inet (\d+\.\d+\.\d+\.\d+)/.exec(execFileSync('ip', ['-4', '-o', 'addr', 'show', 'docker0'], { encoding: 'utf8' }))?.[1];
    expect(gateway, "the engine's default bridge (docker0) has an IPv4 address").toBeDefined();
    // The engine's API on tcp, where containers reach the host: a pass-through to its socket that notes who connects.
    const callers = new Set<string>();
    const proxy: Server = createServer((client) => {
      callers.add(client.remoteAddress ?? '');
      const engine = createConnection('/var/run/docker.sock');
      client.pipe(engine).pipe(client);
      client.on('error', () => engine.destroy());
      engine.on('error', () => client.destroy());
    });
    await new Promise<void>((resolve) => proxy.listen(0, gateway, resolve));
    const port = (proxy.address() as { port: number }).port;
    const engine: EngineAddress = { kind: 'tcp', host: gateway!, port, tls: false };
    const p = plane({ engine });
    const g = group(p);
    try {
      expect(await p.provision(g, 1)).toBe(1);
      const [runner] = await answering(p, g, 1);
      const info = await inspect(runner!.id);
      expect(info.Config.Env).toContain(`DOCKER_HOST=tcp://${gateway}:${port}`);
      expect(info.Mounts.map((m) => m.Destination)).not.toContain('/var/run/docker.sock');
      // The runner's agent lists its leftovers at start: through that address.
      const runnerIp = info.NetworkSettings.Networks['bridge']?.IPAddress;
      expect(await eventually(() => callers.has(runnerIp!), 10_000)).toBe(true);
      // And the plane itself: every call it made went there too.
      expect([...callers].filter((a) => a !== runnerIp)).not.toEqual([]);
    } finally {
      // Through the proxy, while it still runs.
      for (const r of await p.runners(g).catch(() => [])) await p.remove(g, r.id);
      await new Promise((resolve) => proxy.close(resolve));
    }
  });

  it('refuses, saying what to use, an engine its runners could not reach', () => {
    const refusal = (engine: EngineAddress): string => {
      try {
        plane({ engine });
      } catch (err) {
        expect(err).toBeInstanceOf(ControlPlaneError);
        return (err as Error).message;
      }
      return 'accepted';
    };
    expect(refusal({ kind: 'tcp', host: '127.0.0.1', port: 2375, tls: false })).toMatch(
      /DOCKER_HOST=tcp:\/\/127\.0\.0\.1:2375 cannot be given to runner containers: 127\.0\.0\.1 is the manager's own loopback/,
    );
    expect(refusal({ kind: 'tcp', host: '10.0.0.5', port: 2376, tls: true })).toMatch(/with TLS .* use the engine's unix socket/);
    expect(refusal({ kind: 'other', url: 'ssh://me@host' })).toMatch(/supports unix:\/\/\/path\/to\/docker.sock and tcp:\/\/host:port/);
  });
});

/** A host port from which `n` ports are free on 127.0.0.1 (at the time of asking). */
async function freePorts(n: number): Promise<number> {
  const free = (port: number): Promise<boolean> =>
    new Promise((resolve) => {
      const s = createServer();
      s.once('error', () => resolve(false));
      s.listen(port, '127.0.0.1', () => s.close(() => resolve(true)));
    });
  for (;;) {
    const first = 20_000 + Math.floor(Math.random() * 30_000);
    const all = await Promise.all(Array.from({ length: n }, (_, i) => free(first + i)));
    if (all.every(Boolean)) return first;
  }
}

describe('FNTS_RUNNER_PORT_RANGE', () => {
  it('publishes runners on ports of the range only, never one that is taken, and says so when the range is full', async () => {
    const first = await freePorts(3);
    // Something else on the host holds the first port of the range.
    const squatter = createServer();
    await new Promise<void>((resolve) => squatter.listen(first, '127.0.0.1', resolve));
    try {
      const p = plane({ portRange: { first, last: first + 2 } });
      const g = group(p);
      expect(await p.provision(g, 2)).toBe(2);
      const two = await answering(p, g, 2);
      expect(two.map((r) => r.address).sort()).toEqual([`127.0.0.1:${first + 1}`, `127.0.0.1:${first + 2}`]);

      // Full: no third runner, and the error says what to change.
      const err = await p.provision(g, 1).then(
        () => undefined,
        (e: unknown) => e,
      );
      expect(err).toBeInstanceOf(ControlPlaneError);
      expect((err as Error).message).toMatch(new RegExp(`FNTS_RUNNER_PORT_RANGE=${first}-${first + 2}`));
      expect(await p.runners(g)).toHaveLength(2);

      // A port comes free when its runner goes, and only then is it taken again.
      const [gone, kept] = two;
      await p.remove(g, gone!.id);
      expect(await p.provision(g, 1)).toBe(1);
      const after = await answering(p, g, 2);
      expect(after.map((r) => r.address).sort()).toEqual([gone!.address, kept!.address].sort());
      expect(after.find((r) => r.id !== kept!.id)!.id).not.toBe(gone!.id);
    } finally {
      await new Promise((resolve) => squatter.close(resolve));
    }
  });
});
