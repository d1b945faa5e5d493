import { describe, expect, it } from 'vitest';
import { tellEach } from './listeners.js';

describe('tellEach', () => {
  it('tells every listener in turn, logs and skips one that throws, and never throws itself', () => {
    const told: string[] = [];
    const logged: Array<[object, string]> = [];
    const log = { error: (fields: object, message: string) => void logged.push([fields, message]) };
    const bug = new Error('listener bug');
    const listeners = [
      (x: string) => told.push(`a ${x}`),
      undefined,
      () => {
        throw bug;
      },
      (x: string) => told.push(`c ${x}`),
    ];
    tellEach(listeners, (l) => l('news'), log, 'a news listener', { news: 1 });
    expect(told).toEqual(['a news', 'c news']);
    expect(logged).toEqual([[{ err: bug, news: 1 }, 'a news listener threw; it is skipped (listeners must not throw)']]);
    // Without a log the fault is only skipped.
    expect(() => tellEach(listeners, (l) => l('again'), undefined, 'a news listener')).not.toThrow();
    expect(told).toEqual(['a news', 'c news', 'a again', 'c again']);
  });
});
