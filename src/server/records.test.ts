import { pino } from 'pino';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { DatabaseUnavailableError, StorageFullError, type CallLogEntry, type CallStore } from '../datastore/index.js';
import type { Call, CallFn, CallOutcome } from '../models/index.js';
import { successOutcome } from '../../test/support/outcomes.js';
import { CallRecorder } from './records.js';

const fn = { appId: 'A', appName: 'app', fnId: 'F' } as CallFn;
const call = (id: string): Call => ({ id, type: 'sync', fn, triggerId: undefined, method: 'POST', url: 'http://h/invoke/F', headers: [], createdAt: 0 });
const outcome = (id: string): CallOutcome => successOutcome(id);

/** A store that holds every batch until told to let it through. */
function heldStore(): { store: CallStore; batches: Array<{ records: readonly string[]; logs: readonly CallLogEntry[] }>; release(): void } {
  const batches: Array<{ records: readonly string[]; logs: readonly CallLogEntry[] }> = [];
  let release!: () => void;
  const gate = new Promise<void>((r) => (release = r));
  const store = {
    insertSerialized: async (records: readonly string[], logs: readonly CallLogEntry[] = []) => {
      batches.push({ records, logs });
      await gate;
    },
    prune: async () => 0,
  } as unknown as CallStore;
  return { store, batches, release };
}

describe('CallRecorder', () => {
  it('writes what piled up behind a slow write as one batch, record and log together', async () => {
    const held = heldStore();
    const recorder = new CallRecorder({ store: held.store, log: pino({ level: 'silent' }), retentionMs: 1e9, perFn: 1e9 });
    recorder.onCallEnd(call('c0'), outcome('c0'));
    const first = recorder.flush();
    await new Promise((r) => setImmediate(r));
    expect(held.batches).toHaveLength(1);
    for (let i = 1; i <= 3; i++) {
      recorder.onCallEnd(call(`c${i}`), outcome(`c${i}`));
      recorder.onCallLog(call(`c${i}`), `log ${i}\n`);
      void recorder.flush();
    }
    held.release();
    await first;
    await recorder.close();
    expect(held.batches.map((b) => b.records.map((r) => JSON.parse(r).id))).toEqual([['c0'], ['c1', 'c2', 'c3']]);
    expect(held.batches[1]!.logs.map((l) => [l.callId, l.log])).toEqual([
      ['c1', 'log 1\n'],
      ['c2', 'log 2\n'],
      ['c3', 'log 3\n'],
    ]);
  });

  it('holds the record of a call whose log follows until the log comes, then writes both in one batch; a log that never comes lets it go', async () => {
    vi.useFakeTimers();
    try {
      const batches: Array<{ records: string[]; logs: string[] }> = [];
      const store = {
        insertSerialized: async (records: readonly string[], logs: readonly CallLogEntry[] = []) =>
          void batches.push({ records: records.map((r) => JSON.parse(r).id), logs: logs.map((l) => l.callId) }),
        prune: async () => 0,
      } as unknown as CallStore;
      const recorder = new CallRecorder({ store, log: pino({ level: 'silent' }), retentionMs: 1e9, perFn: 1e9 });
      recorder.onCallEnd(call('waits'), outcome('waits'), true);
      recorder.onCallEnd(call('never'), outcome('never'), true);
      recorder.onCallEnd(call('alone'), outcome('alone'));
      await vi.advanceTimersByTimeAsync(500);
      // Only the record with no log to come is written meanwhile.
      expect(batches).toEqual([{ records: ['alone'], logs: [] }]);
      recorder.onCallLog(call('waits'), 'its log\n');
      await vi.advanceTimersByTimeAsync(500);
      expect(batches[1]).toEqual({ records: ['waits'], logs: ['waits'] });
      await vi.advanceTimersByTimeAsync(20_000);
      expect(batches[2]).toEqual({ records: ['never'], logs: [] });
      await recorder.close();
    } finally {
      vi.useRealTimers();
    }
  });

  it('drops and reports records beyond its bound while the store is stuck, and keeps the rest', async () => {
    const held = heldStore();
    const lines: Array<{ dropped?: number; msg?: string }> = [];
    const log = pino({ level: 'error' }, { write: (line: string) => void lines.push(JSON.parse(line)) });
    const recorder = new CallRecorder({ store: held.store, log, retentionMs: 1e9, perFn: 1e9, maxPending: 10 });
    for (let i = 0; i < 25; i++) recorder.onCallEnd(call(`c${i}`), outcome(`c${i}`));
    held.release();
    await recorder.close();
    const stored = held.batches.flatMap((b) => b.records.map((r) => JSON.parse(r).id));
    expect(stored).toEqual(Array.from({ length: 10 }, (_, i) => `c${i}`));
    expect(lines).toHaveLength(1);
    expect(lines[0]).toMatchObject({ dropped: 1, msg: expect.stringContaining('dropped') });
  });
});

describe('CallRecorder on a full disk', () => {
  /** A store with no room until `room` is set; what it stored, in order. */
  function fullStore(failure: () => Error = () => new StorageFullError(Object.assign(new Error('database or disk is full'), { code: 'SQLITE_FULL' }))) {
    const state = { room: false, attempts: 0, stored: [] as string[] };
    const store = {
      insertSerialized: async (records: readonly string[]) => {
        state.attempts++;
        if (!state.room) throw failure();
        state.stored.push(...records.map((r) => JSON.parse(r).id as string));
      },
      prune: async () => 0,
    } as unknown as CallStore;
    return { store, state };
  }

  afterEach(() => vi.useRealTimers());

  it('keeps the records in memory, says how many wait, tries again each second and stores them in order once there is room', async () => {
    vi.useFakeTimers();
    const { store, state } = fullStore();
    const lines: Array<{ level: number; msg: string; waiting?: number }> = [];
    const log = pino({ level: 'info' }, { write: (line: string) => void lines.push(JSON.parse(line)) });
    const recorder = new CallRecorder({ store, log, retentionMs: 1e9, perFn: 1e9 });
    recorder.onCallEnd(call('c0'), outcome('c0'));
    await vi.advanceTimersByTimeAsync(100);
    expect(state.attempts).toBe(1);
    for (let i = 1; i <= 3; i++) recorder.onCallEnd(call(`c${i}`), outcome(`c${i}`));
    // Nothing before the retry: a full disk is not hammered every 100 ms.
    await vi.advanceTimersByTimeAsync(500);
    expect(state.attempts).toBe(1);
    await vi.advanceTimersByTimeAsync(3000);
    expect(state.attempts).toBe(4);
    expect(lines.filter((l) => l.level === 40).map((l) => l.msg)).toEqual([
      "the database's disk is full: call records wait in memory until it has room (1 records and logs waiting; past 100000, new ones are dropped)",
    ]);
    // Ten seconds on, still full: said again, with how many wait now.
    await vi.advanceTimersByTimeAsync(10_000);
    expect(lines.filter((l) => l.level === 40).at(-1)).toMatchObject({ waiting: 4 });
    state.room = true;
    await vi.advanceTimersByTimeAsync(1000);
    expect(state.stored).toEqual(['c0', 'c1', 'c2', 'c3']);
    expect(lines.at(-1)!.msg).toBe('the database has room again: the call records that waited in memory are stored (4 records, 0 logs)');
    recorder.onCallEnd(call('c4'), outcome('c4'));
    await vi.advanceTimersByTimeAsync(100);
    expect(state.stored).toEqual(['c0', 'c1', 'c2', 'c3', 'c4']);
    await recorder.close();
    expect(lines.filter((l) => /lost/.test(l.msg))).toEqual([]);
  });

  it('beyond its bound drops new records and says how many, and at shutdown says what the full disk cost', async () => {
    const { store } = fullStore();
    const lines: Array<{ level: number; msg: string; dropped?: number }> = [];
    const log = pino({ level: 'info' }, { write: (line: string) => void lines.push(JSON.parse(line)) });
    const recorder = new CallRecorder({ store, log, retentionMs: 1e9, perFn: 1e9, maxPending: 5 });
    recorder.onCallEnd(call('c0'), outcome('c0'));
    await recorder.flush();
    for (let i = 1; i <= 7; i++) recorder.onCallEnd(call(`c${i}`), outcome(`c${i}`));
    expect(lines.filter((l) => l.level === 50)).toMatchObject([{ dropped: 1, msg: "the database's disk is full and 5 call records and logs already wait in memory: new ones are dropped (1 so far)" }]);
    await recorder.close();
    expect(lines.at(-1)!.msg).toBe("the database's disk is still full at shutdown: the call records that waited in memory are lost (5 records, 0 logs)");
  });

  it('keeps them the same way while a database server does not answer, and stores them once it does', async () => {
    vi.useFakeTimers();
    const { store, state } = fullStore(() => new DatabaseUnavailableError(Object.assign(new Error('connect ECONNREFUSED 127.0.0.1:5432'), { code: 'ECONNREFUSED' })));
    const lines: Array<{ level: number; msg: string }> = [];
    const log = pino({ level: 'info' }, { write: (line: string) => void lines.push(JSON.parse(line)) });
    const recorder = new CallRecorder({ store, log, retentionMs: 1e9, perFn: 1e9 });
    for (let i = 0; i < 3; i++) recorder.onCallEnd(call(`c${i}`), outcome(`c${i}`));
    await vi.advanceTimersByTimeAsync(2100);
    expect(state.stored).toEqual([]);
    expect(lines.filter((l) => l.level === 40).map((l) => l.msg)).toEqual([
      'the database does not answer: call records wait in memory until it answers (3 records and logs waiting; past 100000, new ones are dropped)',
    ]);
    state.room = true;
    await vi.advanceTimersByTimeAsync(1000);
    expect(state.stored).toEqual(['c0', 'c1', 'c2']);
    expect(lines.at(-1)!.msg).toBe('the database answers again: the call records that waited in memory are stored (3 records, 0 logs)');
    await recorder.close();
  });
});
