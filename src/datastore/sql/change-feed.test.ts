import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { sql } from 'kysely';
import { pino, type Logger } from 'pino';
import { afterAll, afterEach, describe, expect, it } from 'vitest';
import { eventually } from '../../../test/support/wait.js';
import { Changes, type ResourceChange } from '../../models/index.js';
import { linkChanges, PollCursor, type ChangeLink, type ChangeLinkOptions } from './change-feed.js';
import { openSqlite } from './dialects.js';
import type { SqlDatastore } from './store.js';

describe('PollCursor', () => {
  it('takes each id once, in order', () => {
    const cursor = new PollCursor(10);
    expect([11, 12, 13].map((id) => cursor.take(id, 0))).toEqual([true, true, true]);
    expect([12, 13, 9].map((id) => cursor.take(id, 0))).toEqual([false, false, false]);
    expect(cursor.highest).toBe(13);
    expect(cursor.awaited(0)).toEqual([]);
  });

  it('looks for the ids a poll skipped until they come, or for its wait at most', () => {
    const cursor = new PollCursor(0, 1000);
    expect(cursor.take(1, 0)).toBe(true);
    // 2 and 3 are not committed yet when 4 is.
    expect(cursor.take(4, 0)).toBe(true);
    expect(cursor.awaited(10)).toEqual([2, 3]);
    expect(cursor.take(3, 10)).toBe(true);
    expect(cursor.take(3, 10)).toBe(false);
    expect(cursor.awaited(20)).toEqual([2]);
    // 2 never comes (a rolled-back insert): let go after the wait.
    expect(cursor.awaited(999)).toEqual([2]);
    expect(cursor.awaited(1000)).toEqual([]);
    expect(cursor.take(2, 1001)).toBe(false);
  });

  it('keeps the newest skipped ids only, up to its bound', () => {
    const cursor = new PollCursor(0, 1000, 5);
    cursor.take(100, 0);
    expect(cursor.awaited(0)).toEqual([95, 96, 97, 98, 99]);
    cursor.take(103, 1);
    expect(cursor.awaited(1)).toEqual([97, 98, 99, 101, 102]);
  });
});

describe('the change feed between processes on one SQLite file', () => {
  const dir = mkdtempSync(join(tmpdir(), 'fnts-feed-'));
  afterAll(() => rmSync(dir, { recursive: true, force: true }));
  let files = 0;
  const open: Array<{ store: SqlDatastore; link: ChangeLink }> = [];
  afterEach(async () => {
    for (const { store, link } of open.splice(0)) {
      await link.close();
      await store.close();
    }
  });

  interface Node {
    readonly store: SqlDatastore;
    readonly changes: Changes;
    readonly seen: ResourceChange[];
    readonly logged: string[];
  }

  async function node(path: string, options: ChangeLinkOptions = {}): Promise<Node> {
    const store = await openSqlite(path);
    const changes = new Changes();
    const seen: ResourceChange[] = [];
    changes.subscribe((c) => seen.push(c));
    const logged: string[] = [];
    const log: Logger = pino({ level: 'info' }, { write: (line: string) => void logged.push(line) });
    const link = await linkChanges(store, changes, log, { pollMs: 10, ...options });
    open.push({ store, link });
    return { store, changes, seen, logged };
  }

  async function pair(options: ChangeLinkOptions = {}): Promise<[Node, Node]> {
    const path = join(dir, `feed-${files++}.db`);
    return [await node(path, options), await node(path, options)];
  }

  const fn = (id: string): ResourceChange => ({ kind: 'fn', id, appId: 'a1' });
  const rows = async (store: SqlDatastore): Promise<number> =>
    Number(
      (
        await store
          .database()
          .selectFrom('changes')
          .select((eb) => eb.fn.countAll().as('n'))
          .executeTakeFirstOrThrow()
      ).n,
    );
  /** The table away (the other node's polls and sends fail), and back. */
  const away = (store: SqlDatastore): Promise<unknown> => sql`alter table changes rename to changes_away`.execute(store.database());
  const back = (store: SqlDatastore): Promise<unknown> => sql`alter table changes_away rename to changes`.execute(store.database());

  it("brings one node's changes to the other, never back to its own", async () => {
    const [a, b] = await pair();
    a.changes.publish(fn('f1'));
    a.changes.publish({ kind: 'app', id: 'a1', name: 'demo' });
    expect(await eventually(() => b.seen.length === 2, 1000, 5)).toBe(true);
    expect(b.seen).toEqual([fn('f1'), { kind: 'app', id: 'a1', name: 'demo' }]);
    b.changes.publish({ kind: 'trigger', id: 't1', appId: 'a1' });
    expect(await eventually(() => a.seen.length === 3, 1000, 5)).toBe(true);
    // Each saw its own once (as it published them) and the other's once.
    await new Promise((r) => setTimeout(r, 50));
    expect(a.seen).toHaveLength(3);
    expect(b.seen).toHaveLength(3);
  });

  it('tells nothing of the changes made before it started', async () => {
    const path = join(dir, `feed-${files++}.db`);
    const a = await node(path);
    a.changes.publish(fn('early'));
    expect(await eventually(async () => (await rows(a.store)) === 1, 1000, 5)).toBe(true);
    const b = await node(path);
    a.changes.publish(fn('late'));
    expect(await eventually(() => b.seen.length > 0, 1000, 5)).toBe(true);
    expect(b.seen).toEqual([fn('late')]);
  });

  it('reads a row whose id is below one it already read (inserts that committed out of order)', async () => {
    const [a, b] = await pair();
    a.changes.publish(fn('f1'));
    expect(await eventually(() => b.seen.length === 1, 1000, 5)).toBe(true);
    const top = Number(
      (
        await a.store
          .database()
          .selectFrom('changes')
          .select((eb) => eb.fn.max('id').as('id'))
          .executeTakeFirstOrThrow()
      ).id,
    );
    /** Another node's row, its id given. */
    const insert = (id: number, c: ResourceChange): Promise<unknown> =>
      a.store
        .database()
        .insertInto('changes')
        .values({ id, origin: 'another', body: JSON.stringify({ o: 'another', c }), at: Date.now() })
        .execute();
    await insert(top + 2, fn('second'));
    expect(await eventually(() => b.seen.length === 2, 1000, 5)).toBe(true);
    await insert(top + 1, fn('first'));
    expect(await eventually(() => b.seen.length === 3, 1000, 5)).toBe(true);
    expect(b.seen.slice(1)).toEqual([fn('second'), fn('first')]);
    // a saw both too (they are another node's), its own f1 once.
    expect(await eventually(() => a.seen.length === 3, 1000, 5)).toBe(true);
  });

  it('ignores rows that are not a change of ours', async () => {
    const [a, b] = await pair();
    for (const body of ['not json', '{"o":"x","c":{"kind":"fn"}}', '{"o":"x","c":{"kind":"drop"}}', '{"c":{"kind":"reset"}}'])
      await a.store.database().insertInto('changes').values({ origin: 'x', body, at: Date.now() }).execute();
    a.changes.publish(fn('after'));
    expect(await eventually(() => b.seen.length > 0, 1000, 5)).toBe(true);
    expect(b.seen).toEqual([fn('after')]);
  });

  it('publishes a reset once it reads the feed again after failing to, then changes again; a change it could not send goes later', async () => {
    const [a, b] = await pair({ resendMs: 50 });
    await away(a.store);
    expect(await eventually(() => b.logged.some((l) => l.includes('could not read the change feed')), 2000, 5)).toBe(true);
    // Neither can a send: it is kept.
    a.changes.publish(fn('while-away'));
    expect(await eventually(() => a.logged.some((l) => l.includes('could not tell the other nodes')), 2000, 5)).toBe(true);
    await back(a.store);
    expect(await eventually(() => b.seen.some((c) => c.kind === 'reset'), 2000, 5)).toBe(true);
    expect(await eventually(() => b.seen.some((c) => c.kind === 'fn' && c.id === 'while-away'), 2000, 5)).toBe(true);
    // Logged once each, not once per poll.
    expect(b.logged.filter((l) => l.includes('could not read the change feed'))).toHaveLength(1);
    a.changes.publish(fn('after'));
    expect(await eventually(() => b.seen.at(-1)?.kind === 'fn' && (b.seen.at(-1) as { id: string }).id === 'after', 1000, 5)).toBe(true);
  });

  it('sends one reset in place of more changes than it keeps while it cannot send', async () => {
    const [a, b] = await pair({ resendMs: 50 });
    await away(a.store);
    for (let i = 0; i < 1005; i++) a.changes.publish(fn(`f${i}`));
    const before = b.seen.length;
    await back(a.store);
    expect(await eventually(() => b.seen.some((c) => c.kind === 'fn' && c.id === 'f1004'), 3000, 5)).toBe(true);
    const told = b.seen.slice(before);
    // a's reset stands for the first 1000 (b's own poll broke too: its reset as well), then the last ones.
    expect(told.filter((c) => c.kind === 'fn').map((c) => (c as { id: string }).id)).toEqual(['f1000', 'f1001', 'f1002', 'f1003', 'f1004']);
    expect(told.filter((c) => c.kind === 'reset').length).toBeGreaterThanOrEqual(1);
  });

  it('removes rows past their time, whichever node does it', async () => {
    const [a] = await pair({ pruneEveryMs: 20, pruneAfterMs: 200 });
    a.changes.publish(fn('f1'));
    expect(await eventually(async () => (await rows(a.store)) === 1, 1000, 5)).toBe(true);
    expect(await eventually(async () => (await rows(a.store)) === 0, 2000, 20)).toBe(true);
  });

  it('stops at close: what it was sending is sent, nothing after', async () => {
    const path = join(dir, `feed-${files++}.db`);
    const a = await node(path);
    const b = await node(path);
    const { link } = open[0]!;
    a.changes.publish(fn('last'));
    await link.close();
    await link.close();
    expect(await rows(a.store)).toBe(1);
    a.changes.publish(fn('after-close'));
    expect(await eventually(() => b.seen.length === 1, 1000, 5)).toBe(true);
    await new Promise((r) => setTimeout(r, 50));
    expect(b.seen).toEqual([fn('last')]);
    expect(await rows(a.store)).toBe(1);
  });

  it('does nothing for an in-memory database (no other process has it)', async () => {
    const store = await openSqlite(':memory:');
    const changes = new Changes();
    const link = await linkChanges(store, changes, pino({ level: 'silent' }));
    open.push({ store, link });
    changes.publish(fn('f1'));
    await expect(store.database().selectFrom('changes').selectAll().execute()).resolves.toEqual([]);
  });
});
