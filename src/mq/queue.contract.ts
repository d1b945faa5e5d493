/**
 * The Queue contract (queue.ts), as a suite every implementation runs:
 * `runQueueContract(name, open)`, where `open(now)` makes a queue that reads
 * the time from `now` (so leases and delays are driven, not waited for).
 */
import { afterEach, describe, expect, it } from 'vitest';
import type { Queue } from './queue.js';

export interface OpenedQueue {
  readonly queue: Queue;
  /** Closes the queue and whatever it was opened on. */
  close(): Promise<void>;
}

export function runQueueContract(name: string, open: (now: () => number) => Promise<OpenedQueue>): void {
  describe(`Queue contract: ${name}`, () => {
    let opened: OpenedQueue | undefined;
    let t = 1_000_000;
    afterEach(async () => {
      await opened?.close();
      opened = undefined;
    });
    const queue = async (): Promise<Queue> => (opened = await open(() => t)).queue;
    const item = (id: string) => ({ id, fnId: 'f1', callJson: `{"id":"${id}"}`, body: Buffer.from(`body of ${id}`), maxAttempts: 3 });

    it('delivers the oldest ready item to one worker at a time, body and all', async () => {
      const q = await queue();
      await q.enqueue(item('a'));
      t += 1;
      await q.enqueue(item('b'));
      const first = await q.reserve(30_000, 'w1');
      expect(first).toMatchObject({ id: 'a', fnId: 'f1', callJson: '{"id":"a"}', attempts: 0, maxAttempts: 3, redeliveries: 0 });
      expect(first!.body.toString()).toBe('body of a');
      expect((await q.reserve(30_000, 'w1'))?.id).toBe('b');
      expect(await q.reserve(30_000, 'w1')).toBeUndefined();
      expect(await q.size()).toBe(2);
    });

    it('leases many at once, oldest first, none twice; an ended lease is taken back and counted', async () => {
      const q = await queue();
      for (const id of ['a', 'b', 'c']) {
        await q.enqueue(item(id));
        t += 1;
      }
      expect((await q.reserveBatch(2, 30_000, 'w1')).map((c) => c.id)).toEqual(['a', 'b']);
      const [c] = await q.reserveBatch(5, 30_000, 'w2');
      expect(c).toMatchObject({ id: 'c', fnId: 'f1', attempts: 0, redeliveries: 0 });
      expect(c!.body.toString()).toBe('body of c');
      expect(await q.reserveBatch(5, 30_000, 'w2')).toEqual([]);
      t += 30_000;
      const again = await q.reserveBatch(5, 30_000, 'w3');
      expect(again.map((i) => [i.id, i.redeliveries])).toEqual([
        ['a', 1],
        ['b', 1],
        ['c', 1],
      ]);
    });

    it('never leases one item twice to leases taken at the same moment (servers sharing the queue), and leases every item, lapsed ones counted', async () => {
      const q = await queue();
      await Promise.all(Array.from({ length: 120 }, (_, i) => q.enqueue(item(`i${String(i).padStart(3, '0')}`))));
      // Ten leased and left to lapse: taken back by the leases below, and counted.
      const lapsing = (await q.reserveBatch(10, 1000, 'dead')).map((c) => c.id);
      t += 2000;
      const leased = new Map<string, number>();
      let twice = 0;
      await Promise.all(
        Array.from({ length: 6 }, async (_, w) => {
          for (;;) {
            const batch = await q.reserveBatch(7, 30_000, `w${w}`);
            if (batch.length === 0) return;
            for (const c of batch) {
              expect(c.body.toString()).toBe(`body of ${c.id}`);
              if (leased.has(c.id)) twice++;
              leased.set(c.id, c.redeliveries);
            }
          }
        }),
      );
      expect(twice).toBe(0);
      expect(leased.size).toBe(120);
      expect(lapsing.map((id) => leased.get(id))).toEqual(lapsing.map(() => 1));
    });

    it('gives leases taken at the same moment in a backlog a full batch each (each skips what the others hold), the oldest first', async () => {
      const q = await queue();
      for (let g = 0; g < 6; g++) {
        await Promise.all(Array.from({ length: 40 }, (_, i) => q.enqueue(item(`i${String(g * 40 + i).padStart(3, '0')}`))));
        t++;
      }
      for (let round = 0; round < 5; round++) {
        const batches = await Promise.all(Array.from({ length: 3 }, (_, w) => q.reserveBatch(16, 30_000, `w${w}`)));
        expect(batches.map((b) => b.length)).toEqual([16, 16, 16]);
        // Between them, the oldest 48 left.
        expect(batches.flatMap((b) => b.map((c) => c.id)).sort()).toEqual(Array.from({ length: 48 }, (_, i) => `i${String(round * 48 + i).padStart(3, '0')}`));
      }
    });

    it('takes a lapsed lease back within a second of its end while a backlog lasts, once, counted', async () => {
      const q = await queue();
      await q.enqueue(item('lapsing'));
      t += 1;
      for (let i = 0; i < 60; i++) await q.enqueue(item(`b${String(i).padStart(2, '0')}`));
      expect((await q.reserveBatch(1, 500, 'w1')).map((c) => c.id)).toEqual(['lapsing']);
      const ended = t + 500;
      t = ended + 100;
      // Leases of four, 100 ms apart, while the backlog lasts (a queue may give a lapsed item back on its own).
      const seen: string[] = [];
      let back: Awaited<ReturnType<Queue['reserveBatch']>>[number] | undefined;
      while (!back && t - ended <= 2_000) {
        const batch = await q.reserveBatch(4, 60_000, 'w2');
        expect(batch.length).toBeGreaterThan(0);
        seen.push(...batch.map((c) => c.id));
        back = batch.find((c) => c.id === 'lapsing');
        if (!back) t += 100;
      }
      expect(back).toMatchObject({ id: 'lapsing', redeliveries: 1 });
      expect(t - ended).toBeLessThanOrEqual(1_000);
      expect(new Set(seen).size).toBe(seen.length);
    });

    it("leases an item of a fn it is told the time of for that fn's time, the others for the lease asked", async () => {
      const q = await queue();
      await q.enqueue(item('a'));
      t += 1;
      await q.enqueue({ ...item('b'), fnId: 'f2' });
      t += 1;
      await q.enqueue({ ...item('c'), fnId: 'f3' });
      const leased = await q.reserveBatch(
        3,
        1000,
        'w1',
        new Map([
          ['f2', 5000],
          ['f3', 500],
        ]),
      );
      expect(leased.map((c) => c.id)).toEqual(['a', 'b', 'c']);
      // Taken back as each lease ends (by a worker leasing for long).
      t += 501;
      expect((await q.reserveBatch(3, 60_000, 'w2')).map((c) => c.id)).toEqual(['c']);
      t += 500;
      expect((await q.reserveBatch(3, 60_000, 'w2')).map((c) => c.id)).toEqual(['a']);
      t += 3998;
      expect(await q.reserveBatch(3, 60_000, 'w2')).toEqual([]);
      t += 1;
      expect(await q.reserveBatch(3, 60_000, 'w2')).toMatchObject([{ id: 'b', redeliveries: 1 }]);
    });

    it('acknowledges calls that end together, each gone once its acknowledgement resolves, the others untouched', async () => {
      const q = await queue();
      const ids = Array.from({ length: 40 }, (_, i) => `c${i}`);
      await Promise.all(ids.map((id) => q.enqueue(item(id))));
      expect(await q.reserveBatch(40, 30_000, 'w1')).toHaveLength(40);
      // Half of them at once (and one the queue does not hold), the rest left leased.
      await Promise.all([...ids.slice(0, 20), 'never'].map((id) => q.ack(id)));
      expect(await q.has(ids)).toEqual(new Set(ids.slice(20)));
      expect(await q.size()).toBe(20);
      await Promise.all(ids.slice(20).map((id) => q.ack(id)));
      expect(await q.size()).toBe(0);
      t += 30_000;
      expect(await q.reserveBatch(40, 30_000, 'w2')).toEqual([]);
    });

    it('queues calls submitted at once (as a busy intake does), each answered with its own id, one call per idempotency key', async () => {
      const q = await queue();
      const ids = await Promise.all(Array.from({ length: 100 }, (_, i) => q.enqueue({ ...item(`c${i}`), body: Buffer.from(`body ${i}`) }, i % 10 === 0 ? 'same' : undefined)));
      expect(ids.filter((_, i) => i % 10 !== 0)).toEqual(Array.from({ length: 100 }, (_, i) => `c${i}`).filter((_, i) => i % 10 !== 0));
      // Ten submissions with one key, at once: one call, named to each.
      expect(new Set(ids.filter((_, i) => i % 10 === 0)).size).toBe(1);
      expect(await q.size()).toBe(91);
      const leased = await q.reserveBatch(100, 30_000, 'w1');
      expect(leased).toHaveLength(91);
      expect(leased.find((c) => c.id === 'c7')!.body.toString()).toBe('body 7');
    });

    it('tells since when its longest-waiting ready item has been ready', async () => {
      const q = await queue();
      expect(await q.oldestReadyAt()).toBeUndefined();
      const t0 = t;
      await q.enqueue(item('a'));
      t += 500;
      await q.enqueue(item('b'));
      expect(await q.oldestReadyAt()).toBe(t0);
      await q.reserve(30_000, 'w1');
      expect(await q.oldestReadyAt()).toBe(t0 + 500);
      // An item put back for later is not waiting yet.
      await q.reserve(30_000, 'w1');
      await q.retry('b', 10_000, true);
      expect(await q.oldestReadyAt()).toBeUndefined();
      t += 10_000;
      expect(await q.oldestReadyAt()).toBe(t);
    });

    it('delivers again an item whose worker died (its lease ended), unless the lease was extended', async () => {
      const q = await queue();
      await q.enqueue(item('a'));
      await q.reserve(1000, 'w1');
      t += 999;
      expect(await q.reserve(1000, 'w1')).toBeUndefined();
      await q.extend('a', 1000);
      t += 999;
      expect(await q.reserve(1000, 'w1')).toBeUndefined();
      t += 2;
      expect((await q.reserve(1000, 'w1'))?.id).toBe('a');
    });

    it('queues one call per idempotency key and fn for a day, and names the first', async () => {
      const q = await queue();
      expect(await q.enqueue(item('a'), 'k1')).toBe('a');
      expect(await q.enqueue(item('b'), 'k1')).toBe('a');
      expect(await q.enqueue({ ...item('c'), fnId: 'f2' }, 'k1')).toBe('c');
      expect(await q.size()).toBe(2);
      t += 24 * 3600_000 + 1;
      expect(await q.enqueue(item('d'), 'k1')).toBe('d');
      expect(await q.size()).toBe(3);
    });

    it('redrives a dead item, attempts reset, and only a dead one', async () => {
      const q = await queue();
      await q.enqueue(item('a'));
      await q.reserve(60_000, 'w1');
      expect(await q.redrive('f1', 'a')).toBe(false);
      await q.dead('a', 'crashed');
      expect(await q.redrive('f2', 'a')).toBe(false);
      expect(await q.redrive('f1', 'a')).toBe(true);
      expect(await q.reserve(60_000, 'w1')).toMatchObject({ id: 'a', attempts: 0 });
    });

    it('ends at once the leases of a holder known dead', async () => {
      const q = await queue();
      await q.enqueue(item('a'));
      await q.enqueue(item('b'));
      await q.reserve(60_000, 'dead-worker');
      await q.reserve(60_000, 'live-worker');
      expect(await q.releaseDead((h) => h === 'dead-worker')).toBe(1);
      expect((await q.reserve(60_000, 'w2'))?.id).toBe('a');
      expect(await q.reserve(60_000, 'w2')).toBeUndefined();
    });

    it('acknowledged items are gone; retried ones come back after their delay, counted or not; dead ones never', async () => {
      const q = await queue();
      await q.enqueue(item('ok'));
      await q.enqueue(item('again'));
      await q.enqueue(item('busy'));
      await q.enqueue(item('bad'));
      const ids = [];
      for (let i = 0; i < 4; i++) ids.push((await q.reserve(30_000, 'w1'))!.id);
      await q.ack('ok');
      await q.retry('again', 5000, true);
      await q.retry('busy', 0, false);
      await q.dead('bad', 'crashed 3 times');
      expect(await q.reserve(30_000, 'w1')).toMatchObject({ id: 'busy', attempts: 0 });
      expect(await q.reserve(30_000, 'w1')).toBeUndefined();
      t += 5000;
      expect(await q.reserve(30_000, 'w1')).toMatchObject({ id: 'again', attempts: 1 });
      expect(await q.size()).toBe(2);
    });

    it('keeps a body byte for byte, whatever its bytes', async () => {
      const q = await queue();
      const body = Buffer.from(Array.from({ length: 1024 }, (_, i) => i % 256));
      await q.enqueue({ ...item('bin'), body });
      expect((await q.reserve(30_000, 'w1'))!.body.equals(body)).toBe(true);
    });

    it('counts every lease taken back from a dead holder, either way, and only those; a redrive starts over', async () => {
      const q = await queue();
      await q.enqueue(item('a'));
      expect(await q.reserve(1000, 'w1')).toMatchObject({ id: 'a', redeliveries: 0 });
      // Taken back from a holder known dead...
      expect(await q.releaseDead((h) => h === 'w1')).toBe(1);
      expect(await q.reserve(1000, 'w2')).toMatchObject({ id: 'a', redeliveries: 1 });
      // ...and from one whose lease ran out.
      t += 1001;
      expect(await q.reserve(1000, 'w3')).toMatchObject({ id: 'a', redeliveries: 2 });
      // A retry is the worker's own decision, not a redelivery; neither is a lease kept alive.
      await q.retry('a', 0, true);
      expect(await q.reserve(1000, 'w3')).toMatchObject({ id: 'a', attempts: 1, redeliveries: 2 });
      await q.extend('a', 5000);
      t += 2000;
      expect(await q.reserve(1000, 'w4')).toBeUndefined();
      await q.dead('a', 'poison');
      expect(await q.redrive('f1', 'a')).toBe(true);
      expect(await q.reserve(1000, 'w3')).toMatchObject({ id: 'a', attempts: 0, redeliveries: 0 });
    });

    it('tells which calls it holds, dead ones included, acknowledged ones not', async () => {
      const q = await queue();
      for (const id of ['leased', 'dead', 'done', 'ready']) {
        await q.enqueue(item(id));
        t += 1;
      }
      for (const id of ['leased', 'dead', 'done']) expect(await q.reserve(30_000, 'w1')).toMatchObject({ id });
      await q.dead('dead', 'crashed');
      await q.ack('done');
      expect([...(await q.has(['ready', 'leased', 'dead', 'done', 'never']))].sort()).toEqual(['dead', 'leased', 'ready']);
      expect(await q.has([])).toEqual(new Set());
    });

    it('removes dead items once they have been dead long enough, and nothing else', async () => {
      const q = await queue();
      for (const id of ['old', 'young', 'live']) await q.enqueue(item(id));
      for (let i = 0; i < 3; i++) await q.reserve(30_000, 'w1');
      await q.dead('old', 'crashed');
      t += 1000;
      const youngDied = t;
      await q.dead('young', 'crashed');
      t += 60_000;
      expect(await q.pruneDead(youngDied)).toBe(1);
      expect([...(await q.has(['old', 'young', 'live']))].sort()).toEqual(['live', 'young']);
      expect(await q.redrive('f1', 'old')).toBe(false);
      expect(await q.pruneDead(t)).toBe(1);
      expect(await q.has(['old', 'young', 'live'])).toEqual(new Set(['live']));
      expect(await q.size()).toBe(1);
    });
  });
}
