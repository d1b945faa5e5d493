import { describe, expect, it } from 'vitest';
import { computeCapacity, MB, memoryHeadRoom, MemoryCpuTracker, ResourceUnavailableError } from './resource.js';

const GB = 1024 * MB;

describe('computeCapacity', () => {
  const host = { memAvailable: 10 * GB, cgroupMemoryLimit: undefined, cpuCount: 4, cgroupCpuMillis: undefined };

  it('leaves 10% head room, at least 256 MB and at most 5 GB', () => {
    expect(computeCapacity(host, 0, 0)).toEqual({ memoryBytes: 9 * GB, cpuMillis: 4000 });
    expect(memoryHeadRoom(1 * GB)).toBe(256 * MB);
    expect(memoryHeadRoom(100 * GB)).toBe(5 * GB);
  });

  it('is clamped by the cgroup limits and by FN_MAX_TOTAL_*', () => {
    expect(computeCapacity({ ...host, cgroupMemoryLimit: 2 * GB, cgroupCpuMillis: 1500 }, 0, 0)).toEqual({
      memoryBytes: 2 * GB - 256 * MB,
      cpuMillis: 1500,
    });
    expect(computeCapacity(host, 512 * MB, 500)).toEqual({ memoryBytes: 512 * MB, cpuMillis: 500 });
  });

  it('refuses a host that leaves nothing to run functions in', () => {
    expect(() => computeCapacity({ ...host, memAvailable: 200 * MB }, 0, 0)).toThrow(/not enough memory/);
  });
});

describe('MemoryCpuTracker', () => {
  // 1000 MB: 200 MB sync-only reserve, 800 MB async area, high-water mark 640 MB.
  const make = () => new MemoryCpuTracker({ memoryBytes: 1000 * MB, cpuMillis: 2000 });

  it('splits capacity into a 20% sync-only reserve and an 80% async area with an 80% high-water mark', () => {
    expect(make().snapshot().memory).toEqual({ syncTotal: 200 * MB, syncUsed: 0, asyncTotal: 800 * MB, asyncUsed: 0, asyncHighWater: 640 * MB });
    expect(make().snapshot().cpu).toEqual({ syncTotal: 400, syncUsed: 0, asyncTotal: 1600, asyncUsed: 0, asyncHighWater: 1280 });
  });

  it('lets sync calls use the whole server, their reserve first, and async calls only the async area', () => {
    const t = make();
    expect(t.isPossible({ memoryMB: 1000, cpuMillis: 0 })).toBe(true);
    expect(t.isPossible({ memoryMB: 900, cpuMillis: 0, isAsync: true })).toBe(false);
    const sync = t.tryReserve({ memoryMB: 300, cpuMillis: 100 })!;
    expect(t.snapshot().memory).toMatchObject({ syncUsed: 200 * MB, asyncUsed: 100 * MB });
    expect(t.snapshot().cpu).toMatchObject({ syncUsed: 100, asyncUsed: 0 });
    expect(t.tryReserve({ memoryMB: 750, cpuMillis: 0, isAsync: true })).toBeNull();
    const async = t.tryReserve({ memoryMB: 700, cpuMillis: 0, isAsync: true })!;
    expect(t.snapshot().memory).toMatchObject({ syncUsed: 200 * MB, asyncUsed: 800 * MB });
    expect(t.tryReserve({ memoryMB: 1, cpuMillis: 0 })).toBeNull();
    sync.close();
    async.close();
    expect(t.snapshot().memory).toMatchObject({ syncUsed: 0, asyncUsed: 0 });
  });

  it('releases a token exactly once however often it is closed', () => {
    const t = make();
    const a = t.tryReserve({ memoryMB: 600, cpuMillis: 0 })!;
    const b = t.tryReserve({ memoryMB: 300, cpuMillis: 0 })!;
    a.close();
    a.close();
    a.close();
    expect(t.snapshot().memory.syncUsed + t.snapshot().memory.asyncUsed).toBe(300 * MB);
    b.close();
    expect(t.snapshot().memory.syncUsed + t.snapshot().memory.asyncUsed).toBe(0);
  });

  it('makes reserve() wait, counted as a waiter, until a release makes room', async () => {
    const t = make();
    const heard: number[] = [];
    t.onWaiter(() => heard.push(t.waiterCount));
    const big = t.tryReserve({ memoryMB: 900, cpuMillis: 0 })!;
    let granted = false;
    const waiting = t.reserve({ memoryMB: 500, cpuMillis: 0 }).then((tok) => {
      granted = true;
      return tok;
    });
    await Promise.resolve();
    expect(granted).toBe(false);
    expect(t.waiterCount).toBe(1);
    expect(heard).toEqual([1]);
    big.close();
    const tok = await waiting;
    expect(t.waiterCount).toBe(0);
    expect(tok.memoryBytes).toBe(500 * MB);
    tok.close();
  });

  it('drops a waiter whose signal aborts, and refuses at once what can never fit', async () => {
    const t = make();
    const hold = t.tryReserve({ memoryMB: 900, cpuMillis: 0 })!;
    const ac = new AbortController();
    const waiting = t.reserve({ memoryMB: 500, cpuMillis: 0 }, ac.signal);
    ac.abort(new Error('gave up'));
    await expect(waiting).rejects.toThrow('gave up');
    expect(t.waiterCount).toBe(0);
    hold.close();
    expect(t.snapshot().memory.asyncUsed).toBe(0);
    await expect(t.reserve({ memoryMB: 2000, cpuMillis: 0 })).rejects.toBeInstanceOf(ResourceUnavailableError);
  });

  it('holds async dequeueing while the async area is above its high-water mark', async () => {
    const t = make();
    await t.waitAsyncCapacity();
    const heavy = t.tryReserve({ memoryMB: 700, cpuMillis: 0, isAsync: true })!;
    let woke = false;
    const waiting = t.waitAsyncCapacity().then(() => (woke = true));
    await Promise.resolve();
    expect(woke).toBe(false);
    heavy.close();
    await waiting;
    expect(woke).toBe(true);
  });
});

describe('readHost', () => {
  it('reads this machine: some memory available and at least one CPU', async () => {
    const { readHost } = await import('./resource.js');
    const host = readHost();
    expect(host.memAvailable).toBeGreaterThan(64 * MB);
    expect(host.cpuCount).toBeGreaterThanOrEqual(1);
    const cap = computeCapacity(host, 0, 0);
    expect(cap.memoryBytes).toBeGreaterThan(0);
    expect(cap.cpuMillis).toBe(Math.min(host.cpuCount * 1000, host.cgroupCpuMillis ?? Infinity));
  });
});
