import { describe, expect, it, vi } from 'vitest';
import { RunnerSecrets } from './secrets.js';

describe('RunnerSecrets', () => {
  it('serves what a call brought for its fn and version while it runs, and a while after', async () => {
    vi.useFakeTimers();
    try {
      const s = new RunnerSecrets(1000);
      const release = s.hold('f1', 'abc', new Map([['TOKEN', 'v1']]));
      expect((await s.secretsFor('a1', 'f1', 'abc')).get('TOKEN')?.toString()).toBe('v1');
      // Another version, another fn: not these values.
      await expect(s.secretsFor('a1', 'f1', 'def')).rejects.toThrow(/no call brought the secrets of fn f1/);
      await expect(s.secretsFor('a1', 'f2', 'abc')).rejects.toThrow();
      // A fn without secrets has none.
      expect((await s.secretsFor('a1', 'f1', undefined)).size).toBe(0);
      release();
      release();
      vi.advanceTimersByTime(999);
      expect((await s.secretsFor('a1', 'f1', 'abc')).size).toBe(1);
      vi.advanceTimersByTime(1);
      await expect(s.secretsFor('a1', 'f1', 'abc')).rejects.toThrow();
    } finally {
      vi.useRealTimers();
    }
  });

  it('keeps values while any call that brought them runs', async () => {
    vi.useFakeTimers();
    try {
      const s = new RunnerSecrets(10);
      const one = s.hold('f1', 'abc', new Map([['T', 'x']]));
      const two = s.hold('f1', 'abc', new Map([['T', 'x']]));
      one();
      vi.advanceTimersByTime(100);
      expect((await s.secretsFor('a1', 'f1', 'abc')).size).toBe(1);
      two();
      // Held again before the linger ends: kept.
      vi.advanceTimersByTime(5);
      const three = s.hold('f1', 'abc', new Map([['T', 'x']]));
      vi.advanceTimersByTime(100);
      expect((await s.secretsFor('a1', 'f1', 'abc')).size).toBe(1);
      three();
      s.clear();
      await expect(s.secretsFor('a1', 'f1', 'abc')).rejects.toThrow();
    } finally {
      vi.useRealTimers();
    }
  });
});
