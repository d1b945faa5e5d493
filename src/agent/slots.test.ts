import { describe, expect, it } from 'vitest';
import { needsContainer, seedNeedsContainer, slotKey, SlotQueue, type SlotStats } from './slots.js';

describe('SlotQueue', () => {
  it('hands out the most recently released item first (LIFO)', () => {
    const q = new SlotQueue<string>('k');
    q.release('a');
    q.release('b');
    q.release('c');
    expect(q.tryAcquire()).toBe('c');
    expect(q.tryAcquire()).toBe('b');
    expect(q.stats().idle).toBe(1);
  });

  it('serves waiting calls in arrival order (FIFO)', async () => {
    const q = new SlotQueue<string>('k');
    const first = q.acquire();
    const second = q.acquire();
    expect(q.stats().waiting).toBe(2);
    q.release('x');
    q.release('y');
    expect(await first).toBe('x');
    expect(await second).toBe('y');
    expect(q.stats().waiting).toBe(0);
  });

  it('forgets a waiter whose signal aborts; the next item goes idle', async () => {
    const q = new SlotQueue<string>('k');
    const ac = new AbortController();
    const w = q.acquire(ac.signal);
    ac.abort(new Error('timeout'));
    await expect(w).rejects.toThrow('timeout');
    q.release('x');
    expect(q.stats()).toMatchObject({ waiting: 0, idle: 1 });
  });

  it('fails all waiters, or only the oldest', async () => {
    const q = new SlotQueue<string>('k');
    const a = q.acquire();
    const b = q.acquire();
    expect(q.failOldestWaiter(new Error('first'))).toBe(true);
    await expect(a).rejects.toThrow('first');
    expect(q.failWaiters(new Error('all'))).toBe(1);
    await expect(b).rejects.toThrow('all');
  });

  it('keeps a call past its soft deadline while a launch is tied to it, and hands it that container', async () => {
    const q = new SlotQueue<string>('k');
    const ended = q.launch();
    const late = [new AbortController(), new AbortController()];
    const tied = q.acquire(undefined, late[0]!.signal);
    const untied = q.acquire(undefined, late[1]!.signal);
    late[0]!.abort(new Error('busy'));
    late[1]!.abort(new Error('busy'));
    // One launch, two callers: only the oldest is tied to it.
    await expect(untied).rejects.toThrow('busy');
    expect(q.stats()).toMatchObject({ waiting: 1, launching: 1 });
    q.release('fresh');
    ended();
    expect(await tied).toBe('fresh');
  });

  it('lets an overdue call go once the launch tied to it ends without a container', async () => {
    const q = new SlotQueue<string>('k');
    const ended = q.launch();
    const late = new AbortController();
    const w = q.acquire(undefined, late.signal);
    late.abort(new Error('busy'));
    expect(q.stats().waiting).toBe(1);
    ended();
    await expect(w).rejects.toThrow('busy');
    expect(q.stats()).toMatchObject({ waiting: 0, launching: 0 });
  });

  it('removes an item only while it is idle', () => {
    const q = new SlotQueue<string>('k');
    q.release('x');
    expect(q.remove('x')).toBe(true);
    expect(q.remove('x')).toBe(false);
    expect(q.isEmpty()).toBe(true);
  });

  it('keeps state counts and moving averages, the first start included', () => {
    const q = new SlotQueue<string>('k');
    q.enter('start');
    q.exit('start', 5000); // a first start often includes an image pull: it is what starting costs here
    q.enter('start');
    q.exit('start', 400);
    q.record('run', 10);
    q.record('run', 30);
    expect(q.stats().latency).toEqual({ wait: 0, start: 2700, run: 20 });
    expect(() => q.exit('run')).toThrow(/below zero/);
  });
});

describe('the launch decision', () => {
  const stats = (s: Partial<SlotStats> & { run?: number; start?: number }): SlotStats => ({
    waiting: 0,
    starting: 0,
    running: 0,
    idle: 0,
    oldestWaitMs: 0,
    launching: 0,
    oldestLaunchMs: 0,
    latency: { wait: 0, start: s.start ?? 400, run: s.run ?? 0 },
    ...s,
  });

  it('starts a container for the first call, never more starting than waiting', () => {
    expect(needsContainer(stats({ waiting: 0 }))).toBe(false);
    expect(needsContainer(stats({ waiting: 1 }))).toBe(true);
    expect(needsContainer(stats({ waiting: 1, starting: 1 }))).toBe(false);
  });

  it('lets one container drain a queue of fast calls (the seed would start one per caller)', () => {
    const fast = stats({ waiting: 15, running: 1, run: 1, oldestWaitMs: 8 });
    expect(needsContainer(fast)).toBe(false);
    expect(seedNeedsContainer(fast)).toBe(true);
  });

  it('scales out for slow calls that one container cannot drain before another could start', () => {
    expect(needsContainer(stats({ waiting: 15, running: 1, run: 1000, oldestWaitMs: 50 }))).toBe(true);
    expect(needsContainer(stats({ waiting: 2, running: 8, run: 100, oldestWaitMs: 50 }))).toBe(false);
  });

  it('counts a start in progress as lasting at least as long as it already has', () => {
    // 30 calls of 200 ms on three containers need 2 s; starts measured 300 ms,
    // but the one in progress has taken 3 s already: another would not help.
    const s = stats({ waiting: 30, running: 2, starting: 1, launching: 1, run: 200, start: 300, oldestWaitMs: 100 });
    expect(needsContainer(s)).toBe(true);
    expect(needsContainer({ ...s, oldestLaunchMs: 3000 })).toBe(false);
  });

  it('grows a busy fleet by at most doubling it: no more starts in flight than containers serving', () => {
    const slow = { waiting: 40, run: 5000, oldestWaitMs: 100 };
    expect(needsContainer(stats({ ...slow, running: 1, starting: 0 }))).toBe(true);
    expect(needsContainer(stats({ ...slow, running: 1, starting: 1 }))).toBe(false);
    expect(needsContainer(stats({ ...slow, running: 4, starting: 3 }))).toBe(true);
    expect(needsContainer(stats({ ...slow, running: 4, starting: 4 }))).toBe(false);
    // Fn's rule starts one per waiting call at once.
    expect(seedNeedsContainer(stats({ ...slow, running: 4, starting: 20 }))).toBe(true);
  });

  it('starts another when calls have waited longer than a start takes and none is starting', () => {
    expect(needsContainer(stats({ waiting: 3, running: 1, oldestWaitMs: 900 }))).toBe(true);
    expect(needsContainer(stats({ waiting: 3, running: 1, starting: 1, oldestWaitMs: 900 }))).toBe(false);
    expect(needsContainer(stats({ waiting: 3, running: 1, oldestWaitMs: 100 }))).toBe(false);
  });
});

describe('slotKey', () => {
  it('is the same for the same parts in any order and differs when anything differs', () => {
    const a = slotKey({ image: 'i:1', memory: 128, env: { A: '1', B: '2' } });
    expect(slotKey({ env: { B: '2', A: '1' }, memory: 128, image: 'i:1' })).toBe(a);
    expect(slotKey({ image: 'i:1', memory: 128, env: { A: '1', B: '3' } })).not.toBe(a);
    expect(slotKey({ image: 'i:2', memory: 128, env: { A: '1', B: '2' } })).not.toBe(a);
  });
});
