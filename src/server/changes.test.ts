import { describe, expect, it } from 'vitest';
import { Changes } from '../models/index.js';
import { ChangeLog } from './changes.js';

const never = new AbortController().signal;

describe('ChangeLog (GET /v2/runner/changes)', () => {
  it('starts a caller with a reset, then answers the changes after its cursor, waiting for the next one', async () => {
    const feed = new Changes();
    const log = new ChangeLog(feed);
    const first = await log.next(undefined, 0, never);
    expect(first).toMatchObject({ changes: [], reset: true });
    // Nothing new: the caller waits, and is answered when something changes.
    const waiting = log.next(first.cursor, 5000, never);
    setTimeout(() => feed.publish({ kind: 'fn', id: 'f1', appId: 'a1' }), 20);
    const next = await waiting;
    expect(next).toMatchObject({ changes: [{ kind: 'fn', id: 'f1' }], reset: false });
    feed.publish({ kind: 'app', id: 'a1', name: 'x' });
    feed.publish({ kind: 'reset' });
    expect(await log.next(next.cursor, 0, never)).toMatchObject({ changes: [{ kind: 'app' }, { kind: 'reset' }], reset: true });
    // Nothing within the wait: an empty answer with the same cursor.
    const latest = (await log.next(next.cursor, 0, never)).cursor;
    expect(await log.next(latest, 30, never)).toEqual({ cursor: latest, changes: [], reset: false });
    log.close();
  });

  it('answers a reset to a cursor of another process, one it no longer keeps, or one it never gave', async () => {
    const feed = new Changes();
    const log = new ChangeLog(feed);
    const other = new ChangeLog(new Changes());
    const theirs = (await other.next(undefined, 0, never)).cursor;
    expect((await log.next(theirs, 0, never)).reset).toBe(true);
    const start = (await log.next(undefined, 0, never)).cursor;
    for (let i = 0; i < 1500; i++) feed.publish({ kind: 'fn', id: `f${i}`, appId: 'a' });
    expect(await log.next(start, 0, never)).toMatchObject({ changes: [], reset: true });
    expect((await log.next(start.replace(/:\d+$/, ':999999'), 0, never)).reset).toBe(true);
    expect((await log.next('not-a-cursor', 0, never)).reset).toBe(true);
    log.close();
  });

  it('lets a waiting caller go when it hangs up or the server closes', async () => {
    const log = new ChangeLog(new Changes());
    const cursor = (await log.next(undefined, 0, never)).cursor;
    const hangUp = new AbortController();
    const left = log.next(cursor, 30_000, hangUp.signal);
    hangUp.abort();
    expect(await left).toMatchObject({ changes: [], reset: false });
    const closing = log.next(cursor, 30_000, never);
    log.close();
    expect(await closing).toMatchObject({ changes: [] });
  });
});
