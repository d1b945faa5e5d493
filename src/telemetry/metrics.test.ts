import { describe, expect, it } from 'vitest';
import { costBounded } from './metrics.js';

/** A read whose answers the test settles, on a clock the test moves. */
function setup() {
  let now = 0;
  const pending: Array<{ resolve: (n: number) => void; reject: (e: Error) => void }> = [];
  let reads = 0;
  const read = costBounded(
    () =>
      new Promise<number>((resolve, reject) => {
        reads++;
        pending.push({ resolve, reject });
      }),
    () => now,
  );
  return {
    read,
    reads: () => reads,
    at: (ms: number) => (now = ms),
    answer: async (n: number) => {
      pending.shift()!.resolve(n);
      await new Promise((r) => setImmediate(r));
    },
    fail: async () => {
      pending.shift()!.reject(new Error('no database'));
      await new Promise((r) => setImmediate(r));
    },
  };
}

describe('costBounded (the queue depth a scrape reads)', () => {
  it('reuses a reading for twenty times as long as reading takes (the shorter of the last two), then reads again', async () => {
    const s = setup();
    const first = s.read();
    s.at(100);
    await s.answer(5000);
    expect(await first).toBe(5000);
    // The first reading is not reused: what reading takes is not known yet.
    const second = s.read();
    expect(s.reads()).toBe(2);
    s.at(200);
    await s.answer(5001);
    expect(await second).toBe(5001);
    // 100 ms to read, twice: reused until 200 + 2000.
    s.at(2199);
    expect(await s.read()).toBe(5001);
    expect(s.reads()).toBe(2);
    s.at(2200);
    const next = s.read();
    expect(s.reads()).toBe(3);
    await s.answer(4000);
    expect(await next).toBe(4000);
  });

  it('does not take a reading that waited behind other work for its cost: reused for as long as the quick one before allows', async () => {
    const s = setup();
    const warm = s.read();
    s.at(5);
    await s.answer(10);
    await warm;
    // 5 ms, then one that waited 600 ms (the SQLite writer thread's checkpoint): reused for 20 x 5 ms, not 12 s.
    const slow = s.read();
    s.at(605);
    await s.answer(0);
    expect(await slow).toBe(0);
    s.at(704);
    expect(await s.read()).toBe(0);
    s.at(705);
    const fresh = s.read();
    expect(s.reads()).toBe(3);
    await s.answer(24_000);
    expect(await fresh).toBe(24_000);
  });

  it('reuses no reading for longer than 10 s, however long reading takes', async () => {
    const s = setup();
    for (const t of [0, 2000]) {
      const r = s.read();
      s.at(t + 2000);
      await s.answer(t);
      await r;
    }
    // 2 s to read, twice: 40 s by the factor, 10 s at most.
    s.at(4000 + 9999);
    expect(await s.read()).toBe(2000);
    s.at(4000 + 10_000);
    void s.read();
    expect(s.reads()).toBe(3);
  });

  it('reads a quick reading every time it is asked', async () => {
    const s = setup();
    const a = s.read();
    await s.answer(1);
    expect(await a).toBe(1);
    const b = s.read();
    await s.answer(2);
    expect(await b).toBe(2);
    expect(s.reads()).toBe(2);
  });

  it('shares a reading under way with whoever asks meanwhile', async () => {
    const s = setup();
    const a = s.read();
    const b = s.read();
    expect(s.reads()).toBe(1);
    await s.answer(7);
    expect([await a, await b]).toEqual([7, 7]);
  });

  it('keeps no failure: the next ask reads again', async () => {
    const s = setup();
    const a = s.read();
    await s.fail();
    await expect(a).rejects.toThrow('no database');
    const b = s.read();
    expect(s.reads()).toBe(2);
    await s.answer(3);
    expect(await b).toBe(3);
  });
});
