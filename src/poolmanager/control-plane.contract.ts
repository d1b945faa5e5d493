/**
 * The contract every ControlPlane must pass (see control-plane.ts for the
 * rules). Run it from the plugin's test file:
 *
 *     runControlPlaneContract('docker', () => new DockerPlane({...}), { live: true });
 *
 * With `live`, each listed address must be a real runner answering
 * RunnerProtocol.Status with no calls in flight.
 */
import { randomBytes } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ControlPlaneError, type ControlPlane, type RunnerInfo } from './control-plane.js';
import { RunnerStatus } from './status.js';

export interface ControlPlaneContractOptions {
  /** The runners answer Status at their addresses. */
  readonly live: boolean;
  /** How long runners may take to appear with an address, and to answer (ms). */
  readonly startMs?: number;
  /** Group names the suite uses (default: random ones). */
  readonly groups?: readonly [string, string];
}

async function until<T>(what: string, ms: number, get: () => Promise<T | undefined>): Promise<T> {
  const deadline = Date.now() + ms;
  for (;;) {
    const value = await get();
    if (value !== undefined) return value;
    if (Date.now() > deadline) throw new Error(`${what} within ${ms} ms`);
    await new Promise((r) => setTimeout(r, 200));
  }
}

export function runControlPlaneContract(name: string, makePlane: () => Promise<ControlPlane> | ControlPlane, options: ControlPlaneContractOptions): void {
  describe(`ControlPlane contract: ${name}`, () => {
    const suffix = randomBytes(3).toString('hex');
    const [group, other] = options.groups ?? [`ct-${suffix}`, `ct-${suffix}-b`];
    const startMs = options.startMs ?? 30_000;
    let plane: ControlPlane;
    const status = new RunnerStatus();
    let listed: RunnerInfo[] = [];

    /** The group's runners, once there are `n` and each has an address (and answers, when live). */
    const ready = (g: string, n: number): Promise<RunnerInfo[]> =>
      until(`${n} runner(s) of ${g} did not come up`, startMs, async () => {
        const rs = await plane.runners(g);
        if (rs.length !== n || rs.some((r) => r.address === undefined)) return undefined;
        if (options.live) {
          const answers = await Promise.all(
            rs.map((r) =>
              status.probe(r.address!).then(
                (active) => active === 0,
                () => false,
              ),
            ),
          );
          if (answers.includes(false)) return undefined;
        }
        return rs;
      });

    beforeAll(async () => {
      plane = await makePlane();
    });

    afterAll(async () => {
      for (const g of [group, other]) for (const r of await plane.runners(g).catch(() => [])) await plane.remove(g, r.id).catch(() => undefined);
      status.close();
      await plane.close();
    });

    it('lists no runners for a group it never provisioned', async () => {
      expect(await plane.runners(group)).toEqual([]);
    });

    it('provisions runners that appear with distinct ids and addresses (and answer Status, when live)', async () => {
      expect(await plane.provision(group, 2)).toBe(2);
      listed = await ready(group, 2);
      expect(new Set(listed.map((r) => r.id)).size).toBe(2);
      expect(new Set(listed.map((r) => r.address)).size).toBe(2);
      for (const r of listed) {
        expect(r.address).toMatch(/^[^\s:]+:\d+$/);
        expect(Math.abs(r.createdAt - Date.now())).toBeLessThan(10 * 60_000);
      }
    });

    it('keeps groups apart', async () => {
      expect(await plane.provision(other, 1)).toBe(1);
      const theirs = await ready(other, 1);
      expect(theirs.map((r) => r.id)).not.toContain(listed[0]!.id);
      expect((await plane.runners(group)).map((r) => r.id).sort()).toEqual(listed.map((r) => r.id).sort());
      await plane.remove(other, theirs[0]!.id);
      await until(`the other group's runner was not removed`, startMs, async () => ((await plane.runners(other)).length === 0 ? true : undefined));
    });

    it('removes exactly the runner named, and a second removal is no error', async () => {
      const [gone, kept] = listed;
      await plane.remove(group, gone!.id);
      const left = await until(`runner ${gone!.id} was not removed`, startMs, async () => {
        const rs = await plane.runners(group);
        return rs.some((r) => r.id === gone!.id) ? undefined : rs;
      });
      expect(left.map((r) => r.id)).toEqual([kept!.id]);
      if (options.live) expect(await status.probe(kept!.address!)).toBe(0);
      await plane.remove(group, gone!.id);
      await plane.remove(group, 'no-such-runner');
    });

    it('refuses a group name it cannot use, saying what a name may hold', async () => {
      const err = await plane.runners('Not A Group!').then(
        () => undefined,
        (e: unknown) => e,
      );
      expect(err).toBeInstanceOf(ControlPlaneError);
      expect((err as ControlPlaneError).code).toBe('invalid');
      expect((err as Error).message).toMatch(/lower-case letters, digits and dashes/);
    });
  });
}
