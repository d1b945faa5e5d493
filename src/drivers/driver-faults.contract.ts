/**
 * The driver contract when the engine fails (driver.ts's rules, which hold
 * whatever the engine does): for every step of a container's life, and
 * every way an engine can fail at it, the driver turns the failure into a
 * rejection of the method that asked (a DriverError, or one of its kinds),
 * never into a throw out of the process, a promise left rejected, or a
 * method that never settles:
 *
 *   prepare()  rejects with a DriverError, leaving nothing it made running
 *   run()      rejects with a DriverError (ContainerStartError: the engine refused)
 *   wait()     resolves, however the engine answers (a failed wait says 'error', with why),
 *              and once close() removed the container even if the engine never answers
 *   close()    resolves, however the engine answers (a failed removal is retried once,
 *              then left to the owner's clean-up at the next start)
 *   freeze()/unfreeze(), ping(), listContainers(), removeContainers()
 *              resolve or reject with a DriverError
 *   watchStats() never throws; a broken stream just ends the readings
 *
 * Run it with a maker of drivers whose engine fails as told:
 *
 *     runDriverFaultContract('docker', (step, fault) => driverBehindFaultyEngine(step, fault), fixtures);
 *
 * Every (step, fault) pair gets a fresh driver and engine, so the cases run
 * side by side. The suite's fault hook (test/setup/faults.ts) fails the run
 * on anything thrown out of the process meanwhile.
 */
import { randomBytes } from 'node:crypto';
import { PassThrough } from 'node:stream';
import { describe, expect, it } from 'vitest';
import type { ContractProgram } from './driver.contract.js';
import { DriverError, type ContainerSpec, type Cookie, type Driver } from './driver.js';

/** A container's steps, as the engine sees them. */
export type EngineStep = 'ping' | 'inspect-image' | 'create' | 'attach' | 'start' | 'wait' | 'stats' | 'inspect' | 'pause' | 'unpause' | 'remove' | 'list';

export interface FaultyDriver {
  readonly driver: Driver;
  /** Makes every step work again (so the case can clean up what the fault left). */
  heal(): void;
  /** Releases the faulty engine. */
  close(): Promise<void>;
}

export interface DriverFaultFixtures {
  /** Runs until killed. */
  readonly forever: ContractProgram;
  /** The (step, fault) pairs to try: each fault names a way the engine fails (error, reset, ...). */
  readonly cases: ReadonlyArray<readonly [EngineStep, string]>;
  /** Labels every container carries besides the suite's own (a test run's tag). */
  readonly labels?: Readonly<Record<string, string>>;
  /** How long a step may take before it counts as never settling (default 10 s). */
  readonly patienceMs?: number;
  /** Cases run side by side, this many at a time (default 6). */
  readonly concurrency?: number;
}

const MiB = 1024 * 1024;
const SUITE_LABEL = 'fnts.fault-contract';
const CASE_LABEL = 'fnts.fault-contract.case';

/** How a promise settled, or that it did not within `ms`. */
async function settled<T>(p: Promise<T>, ms: number): Promise<{ ok: true; value: T } | { ok: false; error: unknown } | { ok: 'never' }> {
  let timer: NodeJS.Timeout | undefined;
  const late = new Promise<{ ok: 'never' }>((resolve) => (timer = setTimeout(() => resolve({ ok: 'never' }), ms)));
  try {
    return await Promise.race([
      p.then(
        (value) => ({ ok: true as const, value }),
        (error: unknown) => ({ ok: false as const, error }),
      ),
      late,
    ]);
  } finally {
    clearTimeout(timer);
  }
}

/** What went against the rules in one case; empty when the driver kept them all. */
async function runCase(made: FaultyDriver, step: EngineStep, fixtures: DriverFaultFixtures, suite: string): Promise<string[]> {
  const patience = fixtures.patienceMs ?? 10_000;
  const broken: string[] = [];
  const { driver } = made;
  /** A rejection must be a DriverError (where one is allowed at all); a hang is always broken. True when it resolved. */
  const check = async (what: string, p: Promise<unknown>, mayReject: boolean): Promise<boolean> => {
    const r = await settled(p, patience);
    if (r.ok === 'never') broken.push(`${what} did not settle within ${patience} ms`);
    else if (r.ok === false && !mayReject) broken.push(`${what} rejected (it must resolve): ${String(r.error)}`);
    else if (r.ok === false && !(r.error instanceof DriverError)) broken.push(`${what} rejected with ${(r.error as Error)?.name ?? typeof r.error}, not a DriverError: ${String(r.error)}`);
    return r.ok === true;
  };
  const id = `${suite}-${step}-${randomBytes(3).toString('hex')}`;
  // Cases run side by side: each finds only its own containers.
  const labels = { ...fixtures.labels, [SUITE_LABEL]: suite, [CASE_LABEL]: id };
  const spec: ContainerSpec = {
    id,
    image: fixtures.forever.image,
    env: { ...fixtures.forever.env },
    memoryBytes: 64 * MiB,
    cpuMillis: 0,
    labels,
    mounts: [],
    tmpfsBytes: 16 * MiB,
    logs: { stdout: new PassThrough().resume(), stderr: new PassThrough().resume() },
  };
  await check('ping()', driver.ping(), true);
  await check('listContainers()', driver.listContainers(labels), true);
  let cookie: Cookie | undefined;
  await check(
    'prepare()',
    driver.prepare(spec).then((c) => (cookie = c)),
    true,
  );
  if (cookie) {
    if (await check('run()', cookie.run(), true)) {
      const stop = cookie.watchStats(() => undefined, 50);
      await check('freeze()', cookie.freeze(), true);
      await check('unfreeze()', cookie.unfreeze(), true);
      stop();
    }
    await check('close()', cookie.close(), false);
    await check('a second close()', cookie.close(), false);
    await check('wait()', cookie.wait(), false);
  }
  await check('removeContainers()', driver.removeContainers(labels), true);
  // What the fault left behind is removed by a driver that works again; none may keep running unknown to it.
  made.heal();
  await driver.removeContainers(labels);
  if ((await driver.listContainers(labels)).length > 0) broken.push('a container is left after the engine works again and removeContainers() ran');
  return broken;
}

export function runDriverFaultContract(name: string, makeDriver: (step: EngineStep, fault: string) => Promise<FaultyDriver>, fixtures: DriverFaultFixtures): void {
  describe(`Driver contract when the engine fails: ${name}`, () => {
    it(`keeps the rules at every step, however the engine fails (${fixtures.cases.length} cases)`, async () => {
      const suite = `faults-${randomBytes(4).toString('hex')}`;
      const failures: string[] = [];
      const queue = [...fixtures.cases];
      const worker = async (): Promise<void> => {
        for (let next = queue.shift(); next; next = queue.shift()) {
          const [step, fault] = next;
          const made = await makeDriver(step, fault);
          try {
            for (const b of await runCase(made, step, fixtures, suite)) failures.push(`${step}/${fault}: ${b}`);
          } finally {
            await made.driver.close();
            await made.close();
          }
        }
      };
      await Promise.all(Array.from({ length: fixtures.concurrency ?? 6 }, worker));
      expect(failures).toEqual([]);
    }, 120_000);
  });
}
