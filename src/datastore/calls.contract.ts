/**
 * The CallStore contract (calls.ts), as a suite every implementation runs:
 * `runCallStoreContract(name, open)`.
 */
import { afterEach, describe, expect, it } from 'vitest';
import { ApiError, type CallRecord, type CallStatus } from '../models/index.js';
import type { CallLogEntry, CallStore } from './calls.js';

export interface OpenedCallStore {
  readonly calls: CallStore;
  close(): Promise<void>;
}

function record(id: string, fnId: string, createdAt: string, status: CallStatus = 'success'): CallRecord {
  return {
    id,
    status,
    ...(status === 'error' ? { error: 'boom' } : {}),
    app_id: 'app1',
    app_name: 'app',
    fn_id: fnId,
    path: `/invoke/${fnId}`,
    created_at: createdAt,
    started_at: createdAt,
    completed_at: createdAt,
    stats: [],
    timings: { wait_ms: 1, exec_ms: 2 },
  };
}

function log(callId: string, fnId: string, text: string): CallLogEntry {
  return { callId, fnId, appId: 'app1', created: Date.parse(at(1)), log: text };
}

const at = (second: number): string => new Date(Date.UTC(2026, 10, 23, 10, 0, second)).toISOString();

export function runCallStoreContract(name: string, open: () => Promise<OpenedCallStore>): void {
  describe(`CallStore contract: ${name}`, () => {
    let opened: OpenedCallStore | undefined;
    afterEach(async () => {
      await opened?.close();
      opened = undefined;
    });
    const store = async (): Promise<CallStore> => (opened = await open()).calls;

    it('keeps a record as written and finds it only under its own fn', async () => {
      const calls = await store();
      const r = record('c1', 'f1', at(1), 'error');
      await calls.insert([r]);
      expect(await calls.getCall('f1', 'c1')).toEqual(r);
      await expect(calls.getCall('f2', 'c1')).rejects.toMatchObject({ status: 404, message: 'Call not found' });
      await expect(calls.getCall('f1', 'nope')).rejects.toBeInstanceOf(ApiError);
    });

    it('replaces a record written again with the same id (queued, then its outcome)', async () => {
      const calls = await store();
      await calls.insert([{ ...record('c1', 'f1', at(1)), status: 'queued' as CallStatus }]);
      await calls.insert([record('c1', 'f1', at(1))]);
      expect((await calls.getCall('f1', 'c1')).status).toBe('success');
      expect((await calls.listCalls({ fnId: 'f1', perPage: 10 })).items).toHaveLength(1);
    });

    it('lists newest first, page by page, within a time window', async () => {
      const calls = await store();
      // Two calls share a created_at: the id orders them.
      await calls.insert([record('a', 'f1', at(1)), record('b', 'f1', at(2)), record('c', 'f1', at(2)), record('d', 'f1', at(3)), record('x', 'f2', at(2))]);
      const first = await calls.listCalls({ fnId: 'f1', perPage: 2 });
      expect(first.items.map((r) => r.id)).toEqual(['d', 'c']);
      const second = await calls.listCalls({ fnId: 'f1', perPage: 2, cursor: first.nextCursor });
      expect(second.items.map((r) => r.id)).toEqual(['b', 'a']);
      expect(second.nextCursor).toBeUndefined();
      const window = await calls.listCalls({ fnId: 'f1', perPage: 10, fromTime: at(2), toTime: at(2) });
      expect(window.items.map((r) => r.id)).toEqual(['c', 'b']);
      await expect(calls.listCalls({ fnId: 'f1', perPage: 2, cursor: 'garbage' })).rejects.toMatchObject({ status: 400 });
    });

    it('keeps logs apart, each under its call and fn', async () => {
      const calls = await store();
      await calls.insert([record('c1', 'f1', at(1))]);
      await calls.insert([], [log('c1', 'f1', 'line one\nline two\n')]);
      expect(await calls.getLog('f1', 'c1')).toBe('line one\nline two\n');
      await expect(calls.getLog('f2', 'c1')).rejects.toMatchObject({ status: 404, message: 'Call log not found' });
    });

    it('keeps a log written with its record, before it, or after it; a rewritten record keeps its log', async () => {
      const calls = await store();
      // In the same batch as its record.
      await calls.insert([record('same', 'f1', at(1))], [log('same', 'f1', 'together\n')]);
      expect(await calls.getLog('f1', 'same')).toBe('together\n');
      // Before its record (a call cut short): the call shows as running until its record comes.
      await calls.insert([], [log('early', 'f1', 'first\n')]);
      expect(await calls.getCall('f1', 'early')).toMatchObject({ id: 'early', status: 'running', fn_id: 'f1', app_id: 'app1' });
      await calls.insert([record('early', 'f1', at(1), 'error')]);
      expect(await calls.getCall('f1', 'early')).toMatchObject({ status: 'error', error: 'boom' });
      expect(await calls.getLog('f1', 'early')).toBe('first\n');
      // A record with no log yet has none to show.
      await calls.insert([record('late', 'f1', at(1))]);
      await expect(calls.getLog('f1', 'late')).rejects.toMatchObject({ status: 404, message: 'Call log not found' });
      await calls.insert([], [log('late', 'f1', 'after\n')]);
      expect(await calls.getLog('f1', 'late')).toBe('after\n');
      expect((await calls.listCalls({ fnId: 'f1', perPage: 10 })).items).toHaveLength(3);
    });

    it('prunes records older than the retention and beyond the per-fn cap, with their logs', async () => {
      const calls = await store();
      await calls.insert([record('old', 'f1', at(0)), ...[1, 2, 3, 4].map((s) => record(`n${s}`, 'f1', at(s))), record('other', 'f2', at(4))]);
      await calls.insert([], [log('old', 'f1', 'x'), log('n1', 'f1', 'y'), log('n4', 'f1', 'z')]);
      const removed = await calls.prune(at(1), 2);
      expect(removed).toBe(3);
      expect((await calls.listCalls({ fnId: 'f1', perPage: 10 })).items.map((r) => r.id)).toEqual(['n4', 'n3']);
      expect((await calls.listCalls({ fnId: 'f2', perPage: 10 })).items.map((r) => r.id)).toEqual(['other']);
      await expect(calls.getLog('f1', 'n1')).rejects.toMatchObject({ status: 404 });
      expect(await calls.getLog('f1', 'n4')).toBe('z');
    });

    it('lists queued records older than a time, oldest first, page by page, and writes over those still queued only', async () => {
      const calls = await store();
      const queued = (id: string, second: number): CallRecord => ({ ...record(id, 'f1', at(second)), status: 'queued' });
      await calls.insert([queued('q1', 1), queued('q2', 2), queued('q3', 2), record('done', 'f1', at(1)), queued('young', 9)]);
      const first = await calls.queuedBefore(at(5), 2);
      expect(first.map((r) => r.id)).toEqual(['q1', 'q2']);
      const next = await calls.queuedBefore(at(5), 2, { createdAt: first[1]!.created_at, id: first[1]!.id });
      expect(next.map((r) => r.id)).toEqual(['q3']);
      // q2 ran meanwhile: its outcome stays.
      await calls.insert([record('q2', 'f1', at(2))]);
      const failed = [...first, ...next].map((r) => ({ ...r, status: 'error' as CallStatus, error: 'lost' }));
      expect(await calls.replaceQueued(failed)).toBe(2);
      expect(await calls.getCall('f1', 'q1')).toMatchObject({ status: 'error', error: 'lost' });
      expect(await calls.getCall('f1', 'q2')).toMatchObject({ status: 'success' });
      expect((await calls.listCalls({ fnId: 'f1', perPage: 10, fromTime: at(1), toTime: at(1) })).items.map((r) => r.status).sort()).toEqual(['error', 'success']);
      expect(await calls.queuedBefore(at(10), 10)).toMatchObject([{ id: 'young' }]);
    });
  });
}
