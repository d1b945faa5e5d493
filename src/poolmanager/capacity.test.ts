import { describe, expect, it } from 'vitest';
import { CapacityBook } from './capacity.js';

describe('CapacityBook', () => {
  it("sums a group's requirements over the LBs, the latest from each", () => {
    const book = new CapacityBook({ ttlMs: 1000 });
    book.advertise(
      'lb-1',
      [
        ['default', 512],
        ['gpu', 100],
      ],
      0,
    );
    book.advertise('lb-2', [['default', 256]], 0);
    book.advertise('lb-1', [['default', 128]], 10);
    expect(book.demand('default', 20)).toBe(384);
    expect(book.demand('gpu', 20)).toBe(100);
    expect(book.demand('other', 20)).toBe(0);
    expect(book.groups()).toEqual(['default', 'gpu']);
  });

  it('lets a requirement that is not restated expire after the TTL', () => {
    const book = new CapacityBook({ ttlMs: 1000 });
    book.advertise(
      'lb-1',
      [
        ['default', 512],
        ['gpu', 100],
      ],
      0,
    );
    book.advertise('lb-1', [['default', 512]], 900);
    expect(book.demand('gpu', 1000)).toBe(100);
    expect(book.demand('gpu', 1001)).toBe(0);
    expect(book.demand('default', 1001)).toBe(512);
  });

  it('purges an LB that stopped advertising, and says which', () => {
    const purged: string[] = [];
    const book = new CapacityBook({ ttlMs: 1000, onPurge: (lb) => purged.push(lb) });
    book.advertise('lb-1', [['default', 512]], 0);
    book.advertise('lb-2', [['default', 256]], 500);
    expect(book.purge(1200)).toEqual(['lb-1']);
    expect(purged).toEqual(['lb-1']);
    expect(book.lbs()).toEqual(['lb-2']);
    expect(book.demand('default', 1200)).toBe(256);
    // The group stays known: its runners are still managed (scaled to the minimum).
    expect(book.groups()).toEqual(['default']);
  });

  it('takes a negative requirement as none, and a group named only by a membership request as known', () => {
    const book = new CapacityBook({
      ttlMs: 1000,
      onPurge: () => {
        throw new Error('a listener fault');
      },
    });
    book.advertise('lb-1', [['default', -5]], 0);
    expect(book.demand('default', 0)).toBe(0);
    book.touch('batch');
    expect(book.groups()).toEqual(['default', 'batch']);
    expect(book.purge(5000)).toEqual(['lb-1']);
  });
});
