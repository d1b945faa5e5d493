import { describe, expect, it } from 'vitest';
import { isoTime, newId } from './common.js';

describe('newId', () => {
  it('makes unique 26-character Crockford ids that sort in creation order', () => {
    const ids = Array.from({ length: 20_000 }, () => newId());
    expect(new Set(ids).size).toBe(ids.length);
    expect(ids.every((id) => /^[0-9A-HJKMNP-TV-Z]{26}$/.test(id))).toBe(true);
    expect([...ids].sort()).toEqual(ids);
  });

  it('starts with the creation time in milliseconds', () => {
    const before = Date.now();
    const id = newId();
    const digits = '0123456789ABCDEFGHJKMNPQRSTVWXYZ';
    const ms = [...id.slice(0, 10)].reduce((t, c) => t * 32 + digits.indexOf(c), 0);
    expect(ms).toBeGreaterThanOrEqual(before);
    expect(ms).toBeLessThanOrEqual(Date.now());
  });
});

describe('isoTime', () => {
  it('formats like toISOString, across seconds, milliseconds and dates', () => {
    const times = [0, 1, 999, 1000, 1763900000123, 1763900000999, 1763900001000, 1763900001005, 1763900000050.7, 253402300799999, 253402300800000, -1];
    for (const ms of times) expect(isoTime(ms)).toBe(new Date(Math.floor(ms)).toISOString());
  });
});
