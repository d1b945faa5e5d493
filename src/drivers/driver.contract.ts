/**
 * The contract every Driver must pass: the Driver/Cookie rules of driver.ts,
 * each as a test a user of the driver would notice failing. Run it from the
 * implementation's test file, naming the programs it needs:
 *
 *     runDriverContract('docker', () => new DockerDriver(options), fixtures);
 *
 * The programs are named by what they do, not how they are made: the Docker
 * test builds images for them, the fake's test writes FakeFunctions.
 */
import { randomBytes } from 'node:crypto';
import { getEventListeners } from 'node:events';
import { chmodSync, existsSync, mkdtempSync, rmSync } from 'node:fs';
import { request } from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { PassThrough } from 'node:stream';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { DriverError, ImageError, type ContainerSpec, type Cookie, type Driver, type Stat } from './driver.js';

/** An image, and the environment that picks its behaviour. */
export interface ContractProgram {
  readonly image: string;
  readonly env?: Readonly<Record<string, string>>;
}

export interface DriverContractFixtures {
  /**
   * Copies its stdin to its stdout as it arrives; when stdin ends, writes
   * `<n> bytes\n` to stderr (n: the bytes it read) and exits 0.
   */
  readonly echo: ContractProgram;
  /** Exits at once with `code` (not 0). */
  readonly exit: ContractProgram & { readonly code: number };
  /** Takes memory until the kernel kills it. */
  readonly oom: ContractProgram;
  /** Runs until killed, reading nothing, writing nothing. */
  readonly forever: ContractProgram;
  /**
   * An http-stream FDK function: given FN_FORMAT=http-stream and
   * FN_LISTENER=unix:/tmp/iofs/lsnr.sock, binds lsnr.sock in its /tmp/iofs
   * mount and answers `POST /call` with body `{"name": X}` with a 200 whose
   * body contains X.
   */
  readonly httpStream: ContractProgram;
  /** An image the driver cannot have. */
  readonly missingImage: string;
  /** Labels every container the suite makes carries besides its own (a test run's tag). */
  readonly labels?: Readonly<Record<string, string>>;
  /** How long a container may take to start and do its work (default 10 s). */
  readonly patienceMs?: number;
}

const MiB = 1024 * 1024;
const SUITE_LABEL = 'fnts.contract';
const TEST_LABEL = 'fnts.contract.test';

/** `p`, or a failure naming what did not happen within `ms`. */
async function within<T>(p: Promise<T>, ms: number, what: string): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const late = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`${what}: not within ${ms} ms`)), ms);
  });
  try {
    return await Promise.race([p, late]);
  } finally {
    clearTimeout(timer);
  }
}

/** Resolves once `check()` holds, polling; fails after `ms`. */
async function eventually(check: () => boolean, ms: number, what: string): Promise<void> {
  const deadline = Date.now() + ms;
  while (!check()) {
    if (Date.now() > deadline) throw new Error(`${what}: not within ${ms} ms`);
    await new Promise((r) => setTimeout(r, 20));
  }
}

/** A log sink that keeps what it is given. */
class Sink {
  readonly stream = new PassThrough();
  private chunks: Buffer[] = [];

  constructor() {
    this.stream.on('data', (c: Buffer) => this.chunks.push(c));
  }

  text(): string {
    return Buffer.concat(this.chunks).toString('utf8');
  }

  /** Resolves once the text kept so far is `expected`. */
  async becomes(expected: string, ms: number): Promise<void> {
    await eventually(() => this.text() === expected, ms, `output ${JSON.stringify(expected)} (have ${JSON.stringify(this.text())})`);
  }
}

function post(socketPath: string, path: string, body: string): Promise<{ status: number; body: string }> {
  return new Promise((resolve, reject) => {
    const req = request({ socketPath, path, method: 'POST', headers: { 'Content-Type': 'application/json' } }, (res) => {
      const chunks: Buffer[] = [];
      res.on('data', (c: Buffer) => chunks.push(c));
      res.on('end', () => resolve({ status: res.statusCode ?? 0, body: Buffer.concat(chunks).toString('utf8') }));
      res.on('error', reject);
    });
    req.on('error', reject);
    req.end(body);
  });
}

export function runDriverContract(name: string, makeDriver: () => Driver | Promise<Driver>, fixtures: DriverContractFixtures): void {
  describe(`Driver contract: ${name}`, () => {
    const patience = fixtures.patienceMs ?? 10_000;
    const suite = `contract-${randomBytes(4).toString('hex')}`;
    let driver: Driver;
    let test = 0;
    let made = 0;
    let cookies: Cookie[] = [];
    let dirs: string[] = [];

    beforeEach(async () => {
      test++;
      driver = await makeDriver();
    });
    afterEach(async () => {
      await within(Promise.all(cookies.map((c) => c.close())), patience, 'close() of every container the test made');
      // Whatever a failed test left: the suite's own containers only.
      await driver.removeContainers({ [SUITE_LABEL]: suite });
      await driver.close();
      for (const d of dirs) rmSync(d, { recursive: true, force: true });
      cookies = [];
      dirs = [];
    });

    /** The labels of this test's containers. */
    const mine = (): Record<string, string> => ({ [SUITE_LABEL]: suite, [TEST_LABEL]: String(test) });
    const spec = (program: ContractProgram, extra: Partial<ContainerSpec> = {}): ContainerSpec => ({
      id: `${suite}-${++made}`,
      image: program.image,
      env: { ...program.env },
      memoryBytes: 128 * MiB,
      cpuMillis: 0,
      labels: { ...fixtures.labels, ...mine() },
      mounts: [],
      tmpfsBytes: 16 * MiB,
      ...extra,
    });
    const prepare = async (s: ContainerSpec, signal?: AbortSignal): Promise<Cookie> => {
      const cookie = await driver.prepare(s, signal);
      cookies.push(cookie);
      return cookie;
    };
    /** A spec with stdin and log sinks. */
    const withLogs = (program: ContractProgram) => {
      const out = new Sink();
      const err = new Sink();
      return { out, err, spec: spec(program, { stdin: true, logs: { stdout: out.stream, stderr: err.stream } }) };
    };
    const ended = (c: Cookie, what = 'wait()') => within(c.wait(), patience, what);

    describe('prepare', () => {
      it('creates a container listed under its labels, with the engine id of its cookie and its spec id', async () => {
        const s = spec(fixtures.forever);
        const c = await prepare(s);
        expect(await driver.listContainers(mine())).toEqual([{ id: c.id, specId: s.id, labels: expect.objectContaining(s.labels) }]);
        expect(c.stdin, 'no stdin stream without spec.stdin').toBeNull();
        expect(c.timings.imageMs).toBeGreaterThanOrEqual(0);
        expect(c.timings.createMs).toBeGreaterThanOrEqual(0);
      });

      it('refuses an image it cannot have with ImageError, leaving no container', async () => {
        const err: unknown = await driver.prepare(spec({ image: fixtures.missingImage })).then(
          () => undefined,
          (e: unknown) => e,
        );
        expect(err).toBeInstanceOf(ImageError);
        expect((err as ImageError).image).toBe(fixtures.missingImage);
        expect(await driver.listContainers(mine())).toEqual([]);
      });

      it('gives up when its signal has aborted, with the reason, leaving no container', async () => {
        const reason = new Error('the caller left');
        await expect(driver.prepare(spec(fixtures.forever), AbortSignal.abort(reason))).rejects.toBe(reason);
        expect(await driver.listContainers(mine())).toEqual([]);
      });

      it('refuses to prepare once the driver is closed, with DriverError; close() is idempotent', async () => {
        await driver.close();
        await driver.close();
        await expect(driver.prepare(spec(fixtures.forever))).rejects.toBeInstanceOf(DriverError);
        expect(await driver.listContainers(mine())).toEqual([]);
      });
    });

    describe('run and wait', () => {
      it('reports a non-zero exit as error, with the exit code and a message naming it', async () => {
        const c = await prepare(spec(fixtures.exit));
        await c.run();
        const r = await ended(c);
        expect(r).toMatchObject({ status: 'error', exitCode: fixtures.exit.code, oomKilled: false });
        expect(r.message).toContain(String(fixtures.exit.code));
      });

      it("resolves a wait() taken before run() with the run's outcome", async () => {
        const c = await prepare(spec(fixtures.exit));
        const waited = c.wait();
        // Held until the run is over; attached now so a broken driver's rejection is a failure of this test, not a stray fault.
        waited.catch(() => undefined);
        await c.run();
        expect(await within(waited, patience, 'the early wait()')).toMatchObject({ status: 'error', exitCode: fixtures.exit.code });
      });

      it('reports a container killed for exceeding its memory limit as OOM', async () => {
        const c = await prepare(spec(fixtures.oom));
        await c.run();
        const r = await ended(c);
        expect(r).toMatchObject({ status: 'killed', oomKilled: true });
        expect(r.message).toMatch(/memory/);
      });
    });

    describe('stdin, stdout and stderr', () => {
      it('cold: input written and closed after run() reaches the process; all of its stdout is delivered when wait() resolves', async () => {
        const { out, spec: s } = withLogs(fixtures.echo);
        const c = await prepare(s);
        expect(c.stdin, 'a stdin stream with spec.stdin').not.toBeNull();
        await c.run();
        const input = randomBytes(192 * 1024).toString('base64');
        c.stdin!.end(input);
        const r = await ended(c);
        expect(r).toEqual({ status: 'success', exitCode: 0, oomKilled: false, message: undefined });
        expect(out.text().length).toBe(input.length);
        expect(out.text() === input, 'stdout is the input, in order').toBe(true);
      });

      it('stdio formats: stdin stays open between writes, each write reaches the process before the next', async () => {
        const { out, err, spec: s } = withLogs(fixtures.echo);
        const c = await prepare(s);
        await c.run();
        c.stdin!.write('one\n');
        await out.becomes('one\n', patience);
        c.stdin!.write('two\n');
        await out.becomes('one\ntwo\n', patience);
        c.stdin!.end();
        expect(await ended(c)).toMatchObject({ status: 'success', exitCode: 0 });
        expect(err.text()).toBe('8 bytes\n');
      });

      it('delivers stderr to the stderr sink and stdout to the stdout sink, apart', async () => {
        const { out, err, spec: s } = withLogs(fixtures.echo);
        const c = await prepare(s);
        await c.run();
        c.stdin!.end('abc');
        await ended(c);
        expect(out.text()).toBe('abc');
        expect(err.text()).toBe('3 bytes\n');
      });

      it('mounts a host folder: an http-stream function binds its socket there and answers over it', async () => {
        const dir = mkdtempSync(join(tmpdir(), 'fnts-contract-'));
        dirs.push(dir);
        // The function may run as an unprivileged user.
        chmodSync(dir, 0o777);
        const program = fixtures.httpStream;
        const c = await prepare(
          spec(program, {
            env: { ...program.env, FN_FORMAT: 'http-stream', FN_LISTENER: 'unix:/tmp/iofs/lsnr.sock' },
            mounts: [{ hostPath: dir, containerPath: '/tmp/iofs' }],
          }),
        );
        await c.run();
        const socket = join(dir, 'lsnr.sock');
        await eventually(() => existsSync(socket), patience, 'lsnr.sock in the mounted folder');
        const res = await post(socket, '/call', JSON.stringify({ name: 'contract' }));
        expect(res.status).toBe(200);
        expect(res.body).toContain('contract');
      });
    });

    describe('the run signal: it governs the start', () => {
      it('already aborted: run() rejects with its reason; close() then ends the wait()', async () => {
        const reason = new Error('the caller left');
        const c = await prepare(spec(fixtures.forever));
        await expect(c.run(AbortSignal.abort(reason))).rejects.toBe(reason);
        await c.close();
        expect((await ended(c)).status).not.toBe('success');
      });

      it.each([
        { why: 'a TimeoutError', status: 'timeout', reason: new DOMException('deadline', 'TimeoutError') },
        { why: 'any other reason', status: 'cancelled', reason: new DOMException('caller left', 'AbortError') },
      ])('aborted while run() starts the container: run() rejects, the container is killed, and $why says $status', async ({ reason, status }) => {
        const c = await prepare(spec(fixtures.forever));
        const ac = new AbortController();
        const started = c.run(ac.signal);
        ac.abort(reason);
        await expect(started).rejects.toBe(reason);
        const r = await ended(c, 'wait() after the abort');
        expect(r).toMatchObject({ status, oomKilled: false });
        expect(r.message).toBeDefined();
      });

      it('once run() has resolved, the driver lets go of it: a later abort leaves the container running', async () => {
        const { out, spec: s } = withLogs(fixtures.echo);
        const c = await prepare(s);
        const ac = new AbortController();
        await c.run(ac.signal);
        // A server's stop signal lives long: it must neither hold one listener
        // per container it ever started nor cut the calls a stopping server drains.
        expect(getEventListeners(ac.signal, 'abort')).toHaveLength(0);
        ac.abort(new Error('server stopping'));
        c.stdin!.write('still here\n');
        await out.becomes('still here\n', patience);
        c.stdin!.end();
        expect(await ended(c)).toMatchObject({ status: 'success', exitCode: 0 });
      });
    });

    describe('close', () => {
      it('is idempotent: concurrent and repeated closes resolve, the container is gone, wait() says killed', async () => {
        const c = await prepare(spec(fixtures.forever));
        await c.run();
        await within(Promise.all([c.close(), c.close()]), patience, 'two concurrent close()');
        await within(c.close(), patience, 'a third close()');
        expect(await ended(c)).toMatchObject({ status: 'killed', oomKilled: false });
        expect(await driver.listContainers(mine())).toEqual([]);
      });

      it('of a container that never ran resolves its wait() as killed', async () => {
        const c = await prepare(spec(fixtures.forever));
        const waited = c.wait();
        waited.catch(() => undefined);
        await c.close();
        expect(await within(waited, patience, 'wait()')).toMatchObject({ status: 'killed' });
        expect(await driver.listContainers(mine())).toEqual([]);
      });

      it("of a container that exited keeps the exit's outcome", async () => {
        const c = await prepare(spec(fixtures.exit));
        await c.run();
        const r = await ended(c);
        await c.close();
        expect(await c.wait()).toEqual(r);
        expect(await driver.listContainers(mine())).toEqual([]);
      });

      it('of a frozen container removes it and resolves its wait()', async () => {
        const c = await prepare(spec(fixtures.forever));
        await c.run();
        await c.freeze();
        await within(c.close(), patience, 'close()');
        expect(await ended(c)).toMatchObject({ status: 'killed' });
        expect(await driver.listContainers(mine())).toEqual([]);
      });
    });

    it('freeze() and unfreeze() leave a running container working', async () => {
      const { out, spec: s } = withLogs(fixtures.echo);
      const c = await prepare(s);
      await c.run();
      await c.freeze();
      await c.unfreeze();
      c.stdin!.write('thawed\n');
      await out.becomes('thawed\n', patience);
      c.stdin!.end();
      expect(await ended(c)).toMatchObject({ status: 'success', exitCode: 0 });
    });

    it('lists containers carrying all the labels given, and removes only those `which` picks', async () => {
      const a = spec(fixtures.forever, { labels: { ...fixtures.labels, ...mine(), role: 'a' } });
      const b = spec(fixtures.forever, { labels: { ...fixtures.labels, ...mine(), role: 'b' } });
      const ca = await prepare(a);
      const cb = await prepare(b);
      await ca.run();
      const ids = async (labels: Record<string, string>) => (await driver.listContainers(labels)).map((c) => c.id).sort();
      expect(await ids(mine())).toEqual([ca.id, cb.id].sort());
      expect(await ids({ ...mine(), role: 'b' })).toEqual([cb.id]);
      expect(await ids({ ...mine(), role: 'c' })).toEqual([]);

      expect(await driver.removeContainers(mine(), (c) => c.specId === a.id)).toBe(1);
      expect(await ids(mine())).toEqual([cb.id]);
      expect(await driver.removeContainers(mine())).toBe(1);
      expect(await ids(mine())).toEqual([]);
      // The cookies of removed containers still close, and their waits end.
      await within(Promise.all([ca.close(), cb.close()]), patience, 'close() of removed containers');
      await ended(ca);
      await ended(cb);
    });

    it('ping() resolves while the engine answers; an aborted signal rejects with its reason; a closed driver with DriverError', async () => {
      await within(driver.ping(), patience, 'ping()');
      const reason = new Error('the prober gave up');
      await expect(driver.ping(AbortSignal.abort(reason))).rejects.toBe(reason);
      await driver.close();
      await expect(driver.ping()).rejects.toBeInstanceOf(DriverError);
    });

    it('watchStats reports readings of a running container, with its memory limit, until stopped', async () => {
      const s = spec(fixtures.forever);
      const c = await prepare(s);
      await c.run();
      let stop: () => void = () => undefined;
      const first = new Promise<Stat>((resolve) => (stop = c.watchStats(resolve, 100)));
      const stat = await within(first, patience, 'a first reading').finally(() => stop());
      expect(stat.metrics['mem_limit']).toBe(s.memoryBytes);
      expect(Math.abs(stat.timestamp - Date.now())).toBeLessThan(60_000);
      await c.close();
      // Watching a container that is gone is no error: the readings just never come.
      c.watchStats(() => undefined, 100)();
    });
  });
}
