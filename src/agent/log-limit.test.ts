import { describe, expect, it } from 'vitest';
import { ManualClock } from './clock.js';
import { LINE_BURST, LineLimiter, LINES_PER_SECOND } from './log-limit.js';

function limiter(clock = new ManualClock()): { clock: ManualClock; reports: number[]; limit: LineLimiter; admitted: (n: number) => number } {
  const reports: number[] = [];
  const limit = new LineLimiter(clock, (n) => reports.push(n));
  const admitted = (n: number): number => {
    let yes = 0;
    for (let i = 0; i < n; i++) if (limit.admit()) yes++;
    return yes;
  };
  return { clock, reports, limit, admitted };
}

describe('LineLimiter', () => {
  it('admits a burst at once, then drops and counts, and reports the count once the bucket is full again', () => {
    const { clock, reports, admitted } = limiter();
    expect(admitted(5000)).toBe(LINE_BURST);
    expect(reports).toEqual([]);
    clock.advance(1999);
    expect(reports).toEqual([]);
    clock.advance(1);
    expect(reports).toEqual([5000 - LINE_BURST]);
    // Under the limit again: a full burst passes.
    expect(admitted(LINE_BURST)).toBe(LINE_BURST);
  });

  it('admits a steady LINES_PER_SECOND for ever, dropping nothing', () => {
    const { clock, reports, admitted } = limiter();
    for (let s = 0; s < 30; s++) {
      for (let i = 0; i < LINES_PER_SECOND; i++) {
        expect(admitted(1)).toBe(1);
        clock.advance(1000 / LINES_PER_SECOND);
      }
    }
    expect(reports).toEqual([]);
  });

  it('keeps a sustained flood to about LINES_PER_SECOND, with one report per episode, not one per line', () => {
    const { clock, reports, admitted } = limiter();
    let passed = 0;
    // 1,000 lines a second for 20 s.
    for (let ms = 0; ms < 20_000; ms += 10) {
      passed += admitted(10);
      clock.advance(10);
    }
    expect(passed).toBeLessThanOrEqual(LINE_BURST + 20 * LINES_PER_SECOND);
    expect(passed).toBeGreaterThan(10 * LINES_PER_SECOND);
    expect(reports.length).toBeLessThanOrEqual(10);
    expect(reports.reduce((a, b) => a + b, 0) + passed).toBeLessThanOrEqual(20_000);
    expect(reports.reduce((a, b) => a + b, 0) + passed).toBeGreaterThan(20_000 - LINE_BURST * 2);
  });

  it('reports what is still counted when the container ends, once, and leaves no timer behind', () => {
    const { clock, reports, limit, admitted } = limiter();
    admitted(LINE_BURST + 7);
    expect(clock.pending).toBe(1);
    limit.close();
    limit.close();
    expect(reports).toEqual([7]);
    expect(clock.pending).toBe(0);
    clock.advance(10_000);
    expect(reports).toEqual([7]);
  });

  it('says nothing when nothing was dropped', () => {
    const { clock, reports, limit, admitted } = limiter();
    admitted(LINE_BURST);
    limit.close();
    clock.advance(10_000);
    expect(reports).toEqual([]);
  });
});
