import { pino } from 'pino';
import { afterEach, describe, expect, it } from 'vitest';
import { eventually } from '../../test/support/wait.js';
import type { Attempt } from '../rpc/index.js';
import type { CapacityAdvertisement, PoolManagerApi } from './npm-client.js';
import { ManagedPool, StaticPool, type RunnerConnection } from './pool.js';

/** A runner's client that records whether it was closed; calls are never placed through it here. */
class FakeConnection implements RunnerConnection {
  closed = false;
  readonly reachable = true;

  constructor(readonly address: string) {}

  engage(): Promise<Attempt> {
    return Promise.reject(new Error('not in unit tests'));
  }

  close(): void {
    this.closed = true;
  }
}

/** A pool manager whose membership the test sets; it records what it was asked and told. */
class FakeManager implements PoolManagerApi {
  readonly members = new Map<string, string[]>();
  readonly asked: string[] = [];
  readonly ads: CapacityAdvertisement[] = [];
  down = false;
  closed = false;

  async getLBGroup(group: string): Promise<string[]> {
    this.asked.push(group);
    if (this.down) throw new Error('14 UNAVAILABLE: No connection established');
    return [...(this.members.get(group) ?? [])];
  }

  async advertiseCapacity(ad: CapacityAdvertisement): Promise<void> {
    if (this.down) throw new Error('14 UNAVAILABLE: No connection established');
    this.ads.push(ad);
  }

  close(): void {
    this.closed = true;
  }
}

const pools: ManagedPool[] = [];
afterEach(async () => {
  await Promise.all(pools.splice(0).map((p) => p.close()));
});

function managed(manager: FakeManager, periods = { pollMs: 60_000, advertiseMs: 60_000 }): { pool: ManagedPool; connections: FakeConnection[]; warnings: string[] } {
  const connections: FakeConnection[] = [];
  const warnings: string[] = [];
  const log = pino({ level: 'warn' }, { write: (line: string) => void warnings.push((JSON.parse(line) as { msg: string }).msg) });
  const pool = new ManagedPool({
    manager,
    connect: (address) => {
      const c = new FakeConnection(address);
      connections.push(c);
      return c;
    },
    lbId: 'lb-1',
    log,
    ...periods,
  });
  pools.push(pool);
  return { pool, connections, warnings };
}

/** A pool that has had the manager's first answer for each group of `members`. */
async function listing(members: Record<string, string[]>): Promise<ReturnType<typeof managed> & { manager: FakeManager }> {
  const manager = new FakeManager();
  for (const [group, list] of Object.entries(members)) manager.members.set(group, list);
  const made = managed(manager);
  for (const group of Object.keys(members)) made.pool.runners(group);
  await made.pool.refreshAll();
  return { ...made, manager };
}

const addresses = (runners: readonly { address: string }[]): string[] => runners.map((r) => r.address);

describe('ManagedPool', () => {
  it("asks for a group as soon as its first call arrives, and lists its runners in the manager's order", async () => {
    const manager = new FakeManager();
    manager.members.set('gpu', ['r3:9190', 'r1:9190', 'r2:9190']);
    const { pool } = managed(manager);
    expect(pool.runners('gpu')).toEqual([]);
    expect(manager.asked).toEqual(['gpu']);
    await pool.refreshAll();
    expect(addresses(pool.runners('gpu'))).toEqual(['r3:9190', 'r1:9190', 'r2:9190']);
    expect(pool.runners('default')).toEqual([]);
  });

  it('keeps one client per runner across answers, whatever the order or repeats the manager sends', async () => {
    const { pool, connections, manager } = await listing({ default: ['a:1', 'b:1'] });
    const [a, b] = pool.runners('default');
    manager.members.set('default', ['a:1', 'b:1', 'c:1', 'b:1']);
    await pool.refreshAll();
    const after = pool.runners('default');
    expect(addresses(after)).toEqual(['a:1', 'b:1', 'c:1']);
    expect(after[0]).toBe(a);
    expect(after[1]).toBe(b);
    expect(connections.map((c) => c.address)).toEqual(['a:1', 'b:1', 'c:1']);
  });

  it('drains a runner the manager stops listing: no new calls, its client closed only when its last call ends', async () => {
    const { pool, connections, manager } = await listing({ default: ['a:1', 'b:1'] });
    const b = pool.runners('default')[1]!;
    b.hold();
    b.hold();
    manager.members.set('default', ['a:1']);
    await pool.refreshAll();
    expect(addresses(pool.runners('default'))).toEqual(['a:1']);
    expect(addresses(pool.everyRunner())).toEqual(['a:1']);
    expect(b.draining).toBe(true);
    expect(b.up).toBe(false);
    b.release();
    expect(connections[1]!.closed).toBe(false);
    b.release();
    expect(connections[1]!.closed).toBe(true);
    expect(connections[0]!.closed).toBe(false);
  });

  it('takes a draining runner back on its open client, and a closed one on a new client', async () => {
    const { pool, connections, manager } = await listing({ default: ['a:1', 'b:1'] });
    const [a, b] = pool.runners('default');
    a!.hold();
    manager.members.set('default', []);
    await pool.refreshAll();
    expect([a!.draining, b!.closed]).toEqual([true, true]);
    manager.members.set('default', ['b:1', 'a:1']);
    await pool.refreshAll();
    const [b2, a2] = pool.runners('default');
    expect(a2).toBe(a);
    expect(a2!.draining).toBe(false);
    expect(b2).not.toBe(b);
    expect(connections.map((c) => [c.address, c.closed])).toEqual([
      ['a:1', false],
      ['b:1', true],
      ['b:1', false],
    ]);
  });

  it('keeps a runner that another group still lists', async () => {
    const { pool, connections, manager } = await listing({ one: ['a:1'], two: ['a:1'] });
    manager.members.set('one', []);
    await pool.refreshAll();
    expect(addresses(pool.runners('two'))).toEqual(['a:1']);
    expect(connections.map((c) => c.closed)).toEqual([false]);
  });

  it('places on the runners listed last while the manager cannot be reached, warning once', async () => {
    const { pool, warnings, manager } = await listing({ default: ['a:1'] });
    manager.down = true;
    await pool.refreshAll();
    await pool.refreshAll();
    await pool.advertise();
    expect(addresses(pool.runners('default'))).toEqual(['a:1']);
    expect(warnings.filter((w) => w.includes('runners it listed last'))).toHaveLength(1);
    expect(warnings.filter((w) => w.includes('what the runner groups need'))).toHaveLength(1);
  });

  it("advertises each group's memory while its calls wait or run, zero once they are over, with this LB's id", async () => {
    const manager = new FakeManager();
    const { pool } = managed(manager);
    const calls = [pool.need('gpu', 512), pool.need('gpu', 128), pool.need('default', 256)];
    await pool.advertise();
    calls[0]!();
    calls[0]!();
    calls[2]!();
    await pool.advertise();
    calls[1]!();
    await pool.advertise();
    expect(manager.ads.map((a) => a.lbId)).toEqual(['lb-1', 'lb-1', 'lb-1']);
    expect(manager.ads.map((a) => a.snapshots)).toEqual([
      [
        { group: 'gpu', memMbTotal: 640 },
        { group: 'default', memMbTotal: 256 },
      ],
      [
        { group: 'gpu', memMbTotal: 128 },
        { group: 'default', memMbTotal: 0 },
      ],
      [
        { group: 'gpu', memMbTotal: 0 },
        { group: 'default', memMbTotal: 0 },
      ],
    ]);
    expect(Math.abs(manager.ads[0]!.at - Date.now())).toBeLessThan(5_000);
  });

  it('polls and advertises on its schedule once started, and stops when closed with a last advertisement', async () => {
    const manager = new FakeManager();
    manager.members.set('default', ['a:1']);
    const { pool, connections } = managed(manager, { pollMs: 20, advertiseMs: 20 });
    const done = pool.need('default', 128);
    pool.start();
    expect(await eventually(() => manager.asked.length > 3 && manager.ads.length > 3, 5_000, 10)).toBe(true);
    expect(addresses(pool.runners('default'))).toEqual(['a:1']);
    done();
    await pool.close();
    const [asked, ads] = [manager.asked.length, manager.ads.length];
    expect(manager.ads.at(-1)!.snapshots).toEqual([{ group: 'default', memMbTotal: 0 }]);
    expect([manager.closed, connections[0]!.closed]).toEqual([true, true]);
    // Five periods later, nothing more was asked or told.
    await new Promise((r) => setTimeout(r, 100));
    expect([manager.asked.length, manager.ads.length]).toEqual([asked, ads]);
  });
});

describe('StaticPool', () => {
  it('gives every group the same runners in the given order, tells nobody of needs, and closes them', async () => {
    const connections = ['r1:9190', 'r2:9190'].map((a) => new FakeConnection(a));
    const pool = new StaticPool(connections);
    expect(addresses(pool.runners('default'))).toEqual(['r1:9190', 'r2:9190']);
    expect(pool.runners('gpu')).toBe(pool.runners('default'));
    expect(pool.everyRunner()).toBe(pool.runners('default'));
    pool.need()();
    await pool.close();
    expect(connections.map((c) => c.closed)).toEqual([true, true]);
  });
});
