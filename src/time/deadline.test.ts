import { describe, expect, it } from 'vitest';
import { Deadline, within } from './deadline.js';

/**
 * Resolves when a deadline of `ms` passes. Timers fire in the order of their
 * times: once a later one has fired, an earlier one that was going to act has.
 */
const passed = (ms: number): Promise<void> => new Promise((resolve) => new Deadline(ms, resolve));

describe('Deadline', () => {
  it('acts once when the time is up, and says so', async () => {
    let runs = 0;
    let expiredInside: boolean | undefined;
    const d = new Deadline(5, () => {
      runs++;
      expiredInside = d.expired;
    });
    expect(d.expired).toBe(false);
    await passed(20);
    expect([runs, expiredInside, d.expired]).toEqual([1, true, true]);
    d.clear(); // harmless once it has acted
    d.clear();
    expect(runs).toBe(1);
  });

  it('never acts once cleared', async () => {
    let runs = 0;
    const d = new Deadline(5, () => runs++);
    d.clear();
    await passed(20);
    expect([runs, d.expired]).toEqual([0, false]);
  });

  it('acts at a time of the wall clock, at once when that time is past', async () => {
    const order: string[] = [];
    Deadline.at(Date.now() + 10, () => order.push('in 10 ms'));
    Deadline.at(new Date(Date.now() - 1000), () => order.push('past'));
    await passed(30);
    expect(order).toEqual(['past', 'in 10 ms']);
  });
});

describe('within', () => {
  it("is the work's outcome when it comes in time, and late() is never run", async () => {
    let late = 0;
    expect(await within(Promise.resolve('answer'), 10, () => late++)).toBe('answer');
    const failure = new Error('it failed');
    await expect(within(Promise.reject(failure), 10, () => late++)).rejects.toBe(failure);
    await passed(30);
    expect(late).toBe(0);
  });

  it("is late()'s when the time is up first, and a later failure of the work is handled", async () => {
    let fail: (err: Error) => void = () => undefined;
    const work = new Promise<string>((_resolve, reject) => (fail = reject));
    let late = 0;
    expect(await within(work, 5, () => `late ${++late}`)).toBe('late 1');
    fail(new Error('too late to matter'));
    await passed(10);
    expect(late).toBe(1);
    const broken = new Error('late() failed');
    await expect(
      within(new Promise(() => undefined), 5, () => {
        throw broken;
      }),
    ).rejects.toBe(broken);
  });
});
