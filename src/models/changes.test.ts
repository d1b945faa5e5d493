import { pino } from 'pino';
import { describe, expect, it } from 'vitest';
import { Changes, type ResourceChange } from './changes.js';

describe('Changes', () => {
  it('tells every listener, skips one that throws, and stops telling one that unsubscribed', () => {
    const changes = new Changes(pino({ level: 'silent' }));
    const seen: ResourceChange[] = [];
    const late: ResourceChange[] = [];
    changes.subscribe(() => {
      throw new Error('listener bug');
    });
    changes.subscribe((c) => seen.push(c));
    const stop = changes.subscribe((c) => late.push(c));
    changes.publish({ kind: 'fn', id: 'f1', appId: 'a1' });
    stop();
    changes.publish({ kind: 'app', id: 'a1', name: 'demo' });
    expect(seen.map((c) => (c.kind === 'reset' ? 'reset' : c.id))).toEqual(['f1', 'a1']);
    expect(late.map((c) => (c.kind === 'reset' ? 'reset' : c.id))).toEqual(['f1']);
  });
});
