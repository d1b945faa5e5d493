import { pino } from 'pino';
import { describe, expect, it } from 'vitest';
import { CapacityBook } from './capacity.js';
import { PoolManager, type PoolManagerOptions } from './manager.js';
import { MemoryPlane } from './memory-plane.js';
import { conservative } from './predictors.js';

/** A manager over a MemoryPlane, on a clock the test moves, with runners whose Status the test sets. */
function setup(options: Partial<PoolManagerOptions> = {}) {
  let now = 1_000_000;
  const clock = (): number => now;
  const plane = new MemoryPlane(clock);
  const book = new CapacityBook({ ttlMs: 3000 });
  /** Calls in flight per runner address; absent: the runner does not answer. */
  const inFlight = new Map<string, number>();
  const events: string[] = [];
  const manager = new PoolManager({
    plane,
    book,
    predictor: conservative,
    probe: async (address) => {
      const n = inFlight.get(address);
      if (n === undefined) throw new Error('unavailable');
      return n;
    },
    log: pino({ level: 'silent' }),
    runnerMemMb: 1000,
    minRunners: 0,
    maxRunners: 10,
    maxProvisionPerTick: 2,
    tickMs: 1000,
    leadMs: 2000,
    drainGraceMs: 2000,
    maxDrainMs: 60_000,
    startTimeoutMs: 30_000,
    events: { onProvisioned: (g, n) => events.push(`+${n} ${g}`), onRemoved: (g, id) => events.push(`-${id}`) },
    clock,
    ...options,
  });
  /** Every runner the plane made answers Status with no calls in flight. */
  const allUp = async (): Promise<void> => {
    for (const r of await plane.runners('default')) if (!inFlight.has(r.address!)) inFlight.set(r.address!, 0);
  };
  const tick = async (ms = 1000): Promise<void> => {
    now += ms;
    await manager.tick();
  };
  const states = () => Object.fromEntries((manager.view().find((g) => g.group === 'default')?.runners ?? []).map((r) => [r.id, r.state]));
  /** Demand for two runners, met: both up and in the membership. */
  const twoRunnersUp = async (): Promise<void> => {
    book.advertise('lb-1', [['default', 2000]], now);
    await tick();
    await allUp();
    await tick();
  };
  return { plane, book, manager, inFlight, events, allUp, tick, twoRunnersUp, states, advance: (ms: number) => (now += ms), now: () => now };
}

describe('PoolManager', () => {
  it('provisions for the demand, a bounded number a tick, and lists a runner only once it answers Status', async () => {
    const t = setup();
    t.book.advertise('lb-1', [['default', 2500]], t.now());
    await t.tick();
    expect(t.events).toEqual(['+2 default']);
    expect(t.manager.membership('default')).toEqual([]); // starting: not answering yet
    await t.tick();
    expect(t.events).toEqual(['+2 default', '+1 default']);
    t.book.advertise('lb-1', [['default', 2500]], t.now());
    await t.allUp();
    await t.tick();
    expect(t.manager.membership('default')).toEqual(['10.0.0.0:9190', '10.0.0.1:9190', '10.0.0.2:9190']);
    expect(t.events).toHaveLength(2);
  });

  it('drains the newest runner when demand falls: out of the membership at once, removed once its calls are done and the grace passed', async () => {
    const t = setup();
    await t.twoRunnersUp();
    expect(t.manager.membership('default')).toEqual(['10.0.0.0:9190', '10.0.0.1:9190']);

    t.inFlight.set('10.0.0.1:9190', 3);
    t.book.advertise('lb-1', [['default', 900]], t.now());
    await t.tick();
    expect(t.manager.membership('default')).toEqual(['10.0.0.0:9190']);
    expect(t.states()).toEqual({ 'default-0': 'active', 'default-1': 'draining' });
    t.book.advertise('lb-1', [['default', 900]], t.now());
    await t.tick(5000);
    expect(t.plane.removed).toEqual([]); // calls still in flight
    t.inFlight.set('10.0.0.1:9190', 0);
    t.book.advertise('lb-1', [['default', 900]], t.now());
    await t.tick();
    await t.manager.close();
    expect(t.plane.removed).toEqual(['default/default-1']);
    expect(t.events.at(-1)).toBe('-default-1');
    await t.tick();
    expect(t.states()).toEqual({ 'default-0': 'active' });
  });

  it('takes a draining runner back before asking for a new one', async () => {
    const t = setup();
    await t.twoRunnersUp();
    t.inFlight.set('10.0.0.1:9190', 1);
    t.book.advertise('lb-1', [['default', 500]], t.now());
    await t.tick();
    expect(t.manager.membership('default')).toEqual(['10.0.0.0:9190']);
    t.book.advertise('lb-1', [['default', 2000]], t.now());
    await t.tick();
    expect(t.manager.membership('default')).toEqual(['10.0.0.0:9190', '10.0.0.1:9190']);
    expect(t.events).toEqual(['+2 default']);
  });

  it("scales to the group's minimum once its LB stops advertising", async () => {
    const t = setup({ minRunners: 1 });
    t.book.advertise('lb-1', [['default', 3000]], t.now());
    await t.tick();
    await t.tick();
    await t.allUp();
    await t.tick();
    expect(t.manager.membership('default')).toHaveLength(3);
    await t.tick(4000); // past the TTL: lb-1 is purged, demand 0
    expect(t.manager.membership('default')).toEqual(['10.0.0.0:9190']);
    await t.tick(2000);
    await t.manager.close();
    expect(t.plane.removed.sort()).toEqual(['default/default-1', 'default/default-2']);
  });

  it('removes a runner that never answers Status, and forgets one the plane lost', async () => {
    const t = setup({ startTimeoutMs: 5000 });
    t.book.advertise('lb-1', [['default', 1000]], t.now());
    await t.tick();
    const [r] = await t.plane.runners('default');
    for (let i = 0; i < 6; i++) {
      t.book.advertise('lb-1', [['default', 1000]], t.now());
      await t.tick();
    }
    await t.manager.close();
    expect(t.plane.removed).toEqual([`default/${r!.id}`]);
    // The next tick asks for a replacement.
    t.book.advertise('lb-1', [['default', 1000]], t.now());
    await t.tick();
    expect((await t.plane.runners('default')).map((x) => x.id)).toEqual(['default-1']);
    t.book.advertise('lb-1', [['default', 1000]], t.now());
    await t.tick(); // listed: starting
    await t.plane.remove('default', 'default-1'); // the plane lost it
    await t.allUp();
    await t.tick();
    expect(t.events).toEqual(['+1 default', '-default-0', '+1 default', '+1 default']);
  });

  it('orders the membership by when the plane created each runner, whatever order it lists them in', async () => {
    const t = setup();
    const plane = t.plane;
    const listed = [
      { id: 'c', address: '10.0.0.3:9190', createdAt: 30 },
      { id: 'a', address: '10.0.0.1:9190', createdAt: 10 },
      { id: 'b', address: '10.0.0.2:9190', createdAt: 20 },
    ];
    plane.runners = async () => listed;
    for (const r of listed) t.inFlight.set(r.address, 0);
    t.book.advertise('lb-1', [['default', 3000]], t.now());
    await t.tick();
    expect(t.manager.membership('default')).toEqual(['10.0.0.1:9190', '10.0.0.2:9190', '10.0.0.3:9190']);
  });

  it('goes on scaling when its event listener throws: the fault is logged, runners are still asked for and removed', async () => {
    const lines: Array<{ level: number; msg: string; err?: { message: string } }> = [];
    const log = pino({ level: 'info' }, { write: (line: string) => void lines.push(JSON.parse(line) as (typeof lines)[number]) });
    const fault = (): never => {
      throw new Error('a metrics bug');
    };
    const t = setup({ log, events: { onProvisioned: fault, onRemoved: fault } });
    await t.twoRunnersUp();
    expect(t.manager.membership('default')).toEqual(['10.0.0.0:9190', '10.0.0.1:9190']);
    t.book.advertise('lb-1', [['default', 900]], t.now());
    await t.tick();
    t.book.advertise('lb-1', [['default', 900]], t.now());
    await t.tick(5000);
    await t.manager.close();
    expect(t.plane.removed).toEqual(['default/default-1']);
    const faults = lines.filter((l) => l.msg === 'a pool event listener threw; it is skipped (listeners must not throw)');
    expect(faults.map((l) => [l.level, l.err?.message])).toEqual([
      [50, 'a metrics bug'],
      [50, 'a metrics bug'],
    ]);
    // The provisioning tick itself did not fail.
    expect(lines.filter((l) => l.msg.startsWith('scaling runner group'))).toEqual([]);
  });
});
