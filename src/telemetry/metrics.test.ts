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
  it('reuses a reading for twenty times as long as it took, then reads again', async () => {
    const s = setup();
    const first = s.read();
    s.at(100);
    await s.answer(5000);
    expect(await first).toBe(5000);
    // 100 ms to read: reused until 100 + 2000.
    s.at(2099);
    expect(await s.read()).toBe(5000);
    expect(s.reads()).toBe(1);
    s.at(2100);
    const next = s.read();
    expect(s.reads()).toBe(2);
    await s.answer(4000);
    expect(await next).toBe(4000);
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
