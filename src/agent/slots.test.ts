import { describe, expect, it } from 'vitest';
import { needsContainer, seedNeedsContainer, slotKey, SlotQueue, SlotQueues, type SlotStats } from './slots.js';

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

  it('removes an item only while it is idle', () => {
    const q = new SlotQueue<string>('k');
    q.release('x');
    expect(q.remove('x')).toBe(true);
    expect(q.remove('x')).toBe(false);
    expect(q.isEmpty()).toBe(true);
  });

  it('keeps state counts and moving averages; the first start is not counted', () => {
    const q = new SlotQueue<string>('k');
    q.enter('start');
    q.exit('start', 5000); // a first start often includes an image pull
    q.enter('start');
    q.exit('start', 400);
    q.record('run', 10);
    q.record('run', 30);
    expect(q.stats().latency).toEqual({ wait: 0, start: 400, run: 20 });
    expect(() => q.exit('run')).toThrow(/below zero/);
  });
});

describe('SlotQueues', () => {
  it('creates queues on demand and drops them when empty', () => {
    const qs = new SlotQueues<string>();
    const q = qs.get('k');
    expect(qs.get('k')).toBe(q);
    q.release('x');
    expect(qs.dropIfEmpty(q)).toBe(false);
    q.tryAcquire();
    expect(qs.dropIfEmpty(q)).toBe(true);
    expect(qs.peek('k')).toBeUndefined();
  });
});

describe('the launch decision', () => {
  const stats = (s: Partial<SlotStats> & { run?: number; start?: number }): SlotStats => ({
    waiting: 0,
    starting: 0,
    running: 0,
    idle: 0,
    oldestWaitMs: 0,
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
