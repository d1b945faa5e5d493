import { pino } from 'pino';
import { describe, expect, it } from 'vitest';
import type { CallLogEntry, CallStore } from '../datastore/index.js';
import type { Call, CallFn, CallOutcome } from '../models/index.js';
import { CallRecorder } from './records.js';

const fn = { appId: 'A', appName: 'app', fnId: 'F' } as CallFn;
const call = (id: string): Call => ({ id, type: 'sync', fn, triggerId: undefined, method: 'POST', url: 'http://h/invoke/F', headers: [], createdAt: 0 });
const outcome = (id: string): CallOutcome => ({ id, status: 'success', httpStatus: 200, errorUser: false, createdAt: 'c', completedAt: 'd', timings: { wait_ms: 0, exec_ms: 1 }, stats: [] });

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
