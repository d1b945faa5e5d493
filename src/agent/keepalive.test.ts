import { describe, expect, it } from 'vitest';
import { compileConfig } from '../config/config.js';
import { binsFor, DEFAULT_BIN_MS, FixedKeepAlive, HistogramKeepAlive, IdleHistogram, MAX_FNS, MIN_SAMPLES } from './keepalive.js';

const MIN = 60_000;

/** Calls of `fn` lasting 100 ms, each `gaps[i]` ms after the previous one ended; returns when the last ended. */
function play(p: HistogramKeepAlive, fn: string, gaps: readonly number[], start = 0): number {
  let t = start;
  p.callStarted(fn, t);
  t += 100;
  p.callEnded(fn, t);
  for (const gap of gaps) {
    t += gap;
    p.callStarted(fn, t);
    t += 100;
    p.callEnded(fn, t);
  }
  return t;
}

describe('FixedKeepAlive', () => {
  it("keeps an idle container for the fn's idle_timeout and never pre-warms", () => {
    const p = new FixedKeepAlive();
    p.callStarted();
    expect(p.decide('f', 30_000)).toEqual({ keepMs: 30_000, prewarmInMs: undefined, prewarmKeepMs: 0, basis: 'fixed' });
  });
});

describe('HistogramKeepAlive', () => {
  it('behaves as fixed until it has seen a few idle times', () => {
    const p = new HistogramKeepAlive({ binMs: MIN });
    const end = play(p, 'f', Array<number>(MIN_SAMPLES - 1).fill(20 * MIN));
    expect(p.decide('f', 600_000, end)).toMatchObject({ keepMs: 600_000, prewarmInMs: undefined, basis: 'fixed' });
    expect(p.decide('unknown', 30_000, end).basis).toBe('fixed');
  });

  it('a fn called every 20 minutes: released at once, pre-warmed at 90% of the head, kept to 110% of the tail', () => {
    const p = new HistogramKeepAlive({ binMs: MIN });
    const end = play(p, 'f', Array<number>(10).fill(20 * MIN + 5_000));
    const d = p.decide('f', 3_600_000, end);
    expect(d.basis).toBe('histogram');
    expect(d.keepMs).toBe(0);
    // Every idle time is in bin 20: head 20 min, tail 21 min.
    expect(d.prewarmInMs).toBeCloseTo(20 * MIN * 0.9);
    expect(d.prewarmKeepMs).toBeCloseTo(21 * MIN * 1.1 - 20 * MIN * 0.9);
  });

  it("never keeps a container idle longer than the fn's idle_timeout", () => {
    const p = new HistogramKeepAlive({ binMs: MIN });
    const end = play(p, 'f', Array<number>(10).fill(20 * MIN + 5_000));
    expect(p.decide('f', 60_000, end).prewarmKeepMs).toBe(60_000);
    const q = new HistogramKeepAlive({ binMs: MIN });
    // Idle times in the first bin: kept from the call's end to 110% of the tail (66 s), capped at 30 s.
    const e = play(q, 'g', Array<number>(10).fill(45_000));
    expect(q.decide('g', 30_000, e)).toMatchObject({ keepMs: 30_000, prewarmInMs: undefined, basis: 'histogram' });
    expect(q.decide('g', 600_000, e).keepMs).toBeCloseTo(66_000);
  });

  it('an idle_timeout shorter than the window: the pre-warm goes where most idle times fall', () => {
    const p = new HistogramKeepAlive({ binMs: MIN });
    // 5% at 10 minutes, the rest at 30: the window is 9 to 34 minutes, the idle_timeout 5.
    const end = play(p, 'f', [...Array<number>(19).fill(30 * MIN + 5_000), 10 * MIN + 5_000]);
    const d = p.decide('f', 5 * MIN, end);
    // Ready by 30 minutes, kept past 31.
    expect(d.prewarmInMs!).toBeGreaterThan(25 * MIN);
    expect(d.prewarmInMs!).toBeLessThanOrEqual(30 * MIN);
    expect(d.prewarmKeepMs).toBe(5 * MIN);
    expect(d.prewarmInMs! + d.prewarmKeepMs).toBeGreaterThanOrEqual(31 * MIN);
  });

  it('makes no pre-warm whose stay, cut by the idle_timeout, would catch few calls', () => {
    const p = new HistogramKeepAlive({ binMs: MIN });
    // Idle times spread over 10 to 30 minutes: a 1-minute stay holds a twentieth of them.
    const end = play(
      p,
      'f',
      Array.from({ length: 42 }, (_, i) => (10 + (i % 21)) * MIN + 5_000),
    );
    expect(p.decide('f', MIN, end)).toMatchObject({ keepMs: MIN, prewarmInMs: undefined, basis: 'fixed' });
    // A stay as long as the window: pre-warmed (the 5th percentile is in the 11th minute).
    expect(p.decide('f', 3_600_000, end).prewarmInMs).toBeCloseTo(11 * MIN * 0.9);
  });

  it('with 1-second bins, the same rhythm scaled down: released, pre-warmed before the next call', () => {
    const p = new HistogramKeepAlive({ binMs: 1000 });
    const end = play(p, 'f', Array<number>(6).fill(4_400));
    const d = p.decide('f', 3_000, end);
    expect(d.keepMs).toBe(0);
    expect(d.prewarmInMs).toBeCloseTo(3_600);
    expect(d.prewarmKeepMs).toBeCloseTo(5_500 - 3_600);
  });

  it('falls back to fixed when the idle times show no rhythm (coefficient of variation below 2)', () => {
    const p = new HistogramKeepAlive({ binMs: MIN });
    // Spread evenly over the whole range.
    const end = play(
      p,
      'f',
      Array.from({ length: binsFor(MIN) }, (_, i) => i * MIN + 1000),
    );
    expect(p.histogram('f')!.cv()).toBeLessThan(2);
    expect(p.decide('f', 30_000, end).basis).toBe('fixed');
  });

  it('forecasts a fn whose idle times are mostly beyond the range', () => {
    const p = new HistogramKeepAlive({ binMs: MIN });
    const end = play(p, 'f', Array<number>(6).fill(300 * MIN));
    const d = p.decide('f', 24 * 3_600_000, end);
    expect(d.basis).toBe('forecast');
    expect(d.prewarmInMs).toBeCloseTo(300 * MIN * 0.85);
    expect(d.prewarmKeepMs).toBeCloseTo(300 * MIN * 0.3);
    // 85% to 115% is longer than an idle_timeout of an hour: the hour centred on the forecast.
    const capped = p.decide('f', 3_600_000, end);
    expect(capped.prewarmInMs).toBeCloseTo(270 * MIN);
    expect(capped.prewarmKeepMs).toBe(3_600_000);
  });

  it('an idle time is counted only while none of the fn’s calls runs', () => {
    const p = new HistogramKeepAlive({ binMs: MIN });
    p.callStarted('f', 0);
    p.callStarted('f', 10);
    p.callEnded('f', 20);
    p.callStarted('f', 30);
    p.callEnded('f', 40);
    p.callEnded('f', 50);
    expect(p.histogram('f')!.samples).toBe(0);
    p.callStarted('f', 5_050);
    expect(p.histogram('f')!.samples).toBe(1);
    // While a call runs, a container that becomes idle is kept (the fn is not idle).
    play(p, 'f', Array<number>(10).fill(20 * MIN + 5_000), 10_000);
    p.callStarted('f', 1e9);
    expect(p.decide('f', 600_000, 1e9).keepMs).toBeGreaterThan(0);
  });

  it('follows a drifting rhythm: old counts are halved as new ones come', () => {
    const p = new HistogramKeepAlive({ binMs: MIN });
    let t = play(p, 'f', Array<number>(2000).fill(5 * MIN + 1000));
    t = play(p, 'f', Array<number>(2000).fill(30 * MIN + 1000), t + 1000);
    const d = p.decide('f', 3_600_000, t);
    expect(d.prewarmInMs).toBeCloseTo(30 * MIN * 0.9);
  });

  it('remembers a bounded number of fns, the least recently called go first', () => {
    const p = new HistogramKeepAlive({ binMs: MIN });
    for (let i = 0; i <= MAX_FNS; i++) p.callStarted(`f${i}`, i);
    expect(p.histogram('f0')).toBeUndefined();
    expect(p.histogram(`f${MAX_FNS}`)).toBeDefined();
  });

  it('restores a stored histogram only when it fits', () => {
    const p = new HistogramKeepAlive({ binMs: MIN });
    play(p, 'f', Array<number>(10).fill(20 * MIN + 5_000));
    const snap = JSON.parse(JSON.stringify(p.histogram('f')!.snapshot())) as unknown;
    const q = new HistogramKeepAlive({ binMs: MIN });
    expect(q.load('f', snap)).toBe(true);
    q.callStarted('f', 0);
    q.callEnded('f', 100);
    expect(q.decide('f', 3_600_000, 100).prewarmInMs).toBeCloseTo(20 * MIN * 0.9 - 0);
    expect(IdleHistogram.restore(snap, 1000)).toBeUndefined();
    expect(IdleHistogram.restore({ ...(snap as object), bins: 100 }, MIN)).toBeUndefined();
    expect(IdleHistogram.restore({ ...(snap as object), outOfBounds: -1 }, MIN)).toBeUndefined();
    expect(IdleHistogram.restore({ ...(snap as object), entries: [[3, 'x']] }, MIN)).toBeUndefined();
    expect(IdleHistogram.restore({ ...(snap as object), entries: [[240, 1]] }, MIN)).toBeUndefined();
    expect(
      IdleHistogram.restore(
        {
          ...(snap as object),
          entries: [
            [5, 1],
            [3, 1],
          ],
        },
        MIN,
      ),
    ).toBeUndefined();
    expect(IdleHistogram.restore({ ...(snap as object), entries: [[1.5, 1]] }, MIN)).toBeUndefined();
    expect(IdleHistogram.restore({ ...(snap as object), entries: undefined, counts: Array(binsFor(MIN)).fill('x') }, MIN)).toBeUndefined();
    expect(IdleHistogram.restore(null, MIN)).toBeUndefined();
  });

  it('reads a histogram stored the first way (a count for every bin)', () => {
    const counts = Array<number>(binsFor(MIN)).fill(0);
    counts[20] = 10;
    const p = new HistogramKeepAlive({ binMs: MIN });
    expect(p.load('f', { binMs: MIN, counts, outOfBounds: 0, recent: [] })).toBe(true);
    p.callStarted('f', 0);
    p.callEnded('f', 100);
    expect(p.decide('f', 3_600_000, 100).prewarmInMs).toBeCloseTo(20 * MIN * 0.9);
  });

  it('at the default 10 s bins, a fn called every 45 s with idle_timeout 30 s is pre-warmed before its next call', () => {
    const p = new HistogramKeepAlive({ binMs: DEFAULT_BIN_MS });
    const end = play(p, 'f', Array<number>(10).fill(45_000));
    const d = p.decide('f', 30_000, end);
    // Every idle time in the 40-50 s bin: released at once, ready from 36 s to 55 s.
    expect(d).toMatchObject({ keepMs: 0, basis: 'histogram' });
    expect(d.prewarmInMs).toBeCloseTo(36_000);
    expect(d.prewarmInMs! + d.prewarmKeepMs).toBeCloseTo(55_000);
    expect(d.prewarmKeepMs).toBeLessThanOrEqual(30_000);
  });

  it('share(from, to) counts whole bins inside and the parts of the end bins in proportion', () => {
    const h = new IdleHistogram(1000);
    for (const idle of [500, 1500, 1600, 7200, 7300, 7400, 7500]) h.add(idle);
    // Bins 0 (1), 1 (2), 7 (4) of 7 idle times.
    expect(h.share(0, 2000)).toBeCloseTo(3 / 7);
    expect(h.share(500, 1500)).toBeCloseTo((0.5 + 2 * 0.5) / 7);
    expect(h.share(7250, 7750)).toBeCloseTo((4 * 0.5) / 7);
    expect(h.share(2000, 7000)).toBe(0);
    expect(h.share(0, 1e9)).toBeCloseTo(1);
    expect(h.share(5000, 5000)).toBe(0);
  });

  it('keeps only the bins that hold counts, and covers 4 hours at the default', () => {
    expect(compileConfig({}).agent.keepAliveBinMs).toBe(DEFAULT_BIN_MS);
    expect(compileConfig({}).agent.keepAlivePolicy).toBe('histogram');
    expect(binsFor(DEFAULT_BIN_MS) * DEFAULT_BIN_MS).toBe(4 * 3_600_000);
    const p = new HistogramKeepAlive({ binMs: DEFAULT_BIN_MS });
    play(p, 'f', Array<number>(50).fill(45_000));
    expect(p.histogram('f')!.snapshot().entries).toEqual([[4, 50]]);
  });
});
