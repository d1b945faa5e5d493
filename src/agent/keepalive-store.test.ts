import { pino } from 'pino';
import { describe, expect, it } from 'vitest';
import { ManualClock } from './clock.js';
import { HistogramKeepAlive } from './keepalive.js';
import { FLUSH_MS, HistogramPersistence, type HistogramStore, type StoredHistogram } from './keepalive-store.js';

const MIN = 60_000;
const log = pino({ level: 'silent' });

/** A store in memory that counts its writes and may be told to fail. */
class MemoryStore implements HistogramStore {
  rows = new Map<string, string>();
  writes = 0;
  failing = false;
  async loadHistograms(): Promise<StoredHistogram[]> {
    return [...this.rows].map(([fnId, data]) => ({ fnId, data }));
  }
  async saveHistograms(rows: readonly StoredHistogram[]): Promise<void> {
    if (this.failing) throw new Error('database away');
    this.writes++;
    for (const r of rows) this.rows.set(r.fnId, r.data);
  }
}

/** Calls of `fn` every 20 minutes from `t`; returns when the last ended. */
function calls(p: HistogramKeepAlive, fn: string, n: number, t = 0): number {
  for (let i = 0; i < n; i++) {
    p.callStarted(fn, t);
    p.callEnded(fn, t + 100);
    t += 20 * MIN + 5_000;
  }
  return t - 20 * MIN - 5_000 + 100;
}

const settle = () => new Promise((r) => setImmediate(r));

describe('HistogramPersistence', () => {
  it('a restarted agent decides from what the last one learned', async () => {
    const store = new MemoryStore();
    const clock = new ManualClock();
    const before = new HistogramKeepAlive({ binMs: MIN });
    const saver = new HistogramPersistence(before, store, clock, log);
    await saver.start();
    const end = calls(before, 'f', 10);
    await saver.close();
    expect(clock.pending).toBe(0);

    const after = new HistogramKeepAlive({ binMs: MIN });
    await new HistogramPersistence(after, store, new ManualClock(), log).start();
    // Its first call after the restart already knows the rhythm.
    after.callStarted('f', 0);
    after.callEnded('f', 100);
    expect(after.decide('f', 3_600_000, 100)).toEqual(before.decide('f', 3_600_000, end));
    expect(after.decide('f', 3_600_000, 100).basis).toBe('histogram');
  });

  it('writes each changed histogram at most once a minute, all in one write', async () => {
    const store = new MemoryStore();
    const clock = new ManualClock();
    const p = new HistogramKeepAlive({ binMs: MIN });
    const saver = new HistogramPersistence(p, store, clock, log);
    await saver.start();
    calls(p, 'f', 5);
    calls(p, 'g', 5);
    clock.advance(FLUSH_MS - 1);
    await settle();
    expect(store.writes).toBe(0);
    clock.advance(1);
    await settle();
    expect(store.writes).toBe(1);
    expect([...store.rows.keys()].sort()).toEqual(['f', 'g']);
    // Nothing changed: nothing written.
    clock.advance(FLUSH_MS);
    await settle();
    expect(store.writes).toBe(1);
    await saver.close();
  });

  it('a write that fails is tried again with the next; a stored row that does not fit is skipped', async () => {
    const store = new MemoryStore();
    store.rows.set('bad-json', '{');
    store.rows.set('other-bins', JSON.stringify({ binMs: 1000, counts: [], outOfBounds: 0, recent: [] }));
    const clock = new ManualClock();
    const p = new HistogramKeepAlive({ binMs: MIN });
    const saver = new HistogramPersistence(p, store, clock, log);
    await saver.start();
    expect(p.histogram('bad-json')).toBeUndefined();
    expect(p.histogram('other-bins')).toBeUndefined();
    calls(p, 'f', 3);
    store.failing = true;
    clock.advance(FLUSH_MS);
    await settle();
    expect(store.rows.has('f')).toBe(false);
    store.failing = false;
    clock.advance(FLUSH_MS);
    await settle();
    expect(store.rows.has('f')).toBe(true);
    await saver.close();
  });
});
