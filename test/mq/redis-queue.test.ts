/**
 * The Queue contract on a real Redis server (Debian's redis-server, started
 * for this file), and what fnts asks of that server: that it keeps queued
 * calls across its own restart (its append-only file), or fnts does not
 * start on it; and that calls a queue lost anyway do not stay `queued`
 * forever (the reconciler).
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pino } from 'pino';
import { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { openSqlite, type SqlDatastore } from '../../src/datastore/index.js';
import type { CallRecord } from '../../src/models/index.js';
import { RedisQueue } from '../../src/mq/redis.js';
import { runQueueContract } from '../../src/mq/queue.contract.js';
import { LOST_REASON, QueueReconciler } from '../../src/server/detached.js';
import { startRedis, type TestRedis } from '../support/redis.js';
import { startTestServer } from '../support/server.js';
import { eventually } from '../support/wait.js';

let redis: TestRedis;
let volatile: TestRedis;
beforeAll(async () => {
  [redis, volatile] = await Promise.all([startRedis(), startRedis({ volatile: true })]);
});
afterAll(async () => {
  await Promise.all([redis?.stop(), volatile?.stop()]);
});

let n = 0;
runQueueContract('redis', async (now) => {
  // A key prefix per test: each starts with an empty queue.
  const queue = new RedisQueue(redis.url, `fnts-test:${process.pid}:${n++}:`, now);
  return { queue, close: () => queue.close() };
});

const item = (id: string) => ({ id, fnId: 'f1', callJson: `{"id":"${id}"}`, body: Buffer.from(id), maxAttempts: 3 });

describe("a Redis queue's durability", () => {
  it('tells whether the server keeps its data: an fsynced append-only file, nothing, or it will not say', async () => {
    const durable = new RedisQueue(redis.url);
    const loose = new RedisQueue(volatile.url);
    const admin = new Redis(redis.url);
    try {
      expect(await durable.persistence()).toEqual({ kind: 'durable', appendfsync: 'everysec' });
      expect(await loose.persistence()).toEqual({ kind: 'volatile', appendonly: 'no', appendfsync: 'everysec', save: '' });
      // A user the server does not let run CONFIG (as managed Redis services do).
      await admin.call('ACL', 'SETUSER', 'noconfig', 'on', '>secret', '~*', '+@all', '-config');
      const refused = new RedisQueue(redis.url.replace('redis://', 'redis://noconfig:secret@'));
      try {
        expect(await refused.persistence()).toMatchObject({ kind: 'unknown', refusal: expect.stringMatching(/NOPERM/) });
      } finally {
        await refused.close();
      }
    } finally {
      admin.disconnect();
      await Promise.all([durable.close(), loose.close()]);
    }
  });

  it('keeps a queued call across a SIGKILL of Redis when its append-only file is on', async () => {
    const queue = new RedisQueue(redis.url, `fnts-test:${process.pid}:restart:`);
    try {
      await queue.enqueue(item('kept'));
      await redis.restart();
      expect(await eventually(async () => (await queue.reserve(30_000, 'w1').catch(() => undefined))?.id === 'kept', 10_000)).toBe(true);
    } finally {
      await queue.close();
    }
  });

  it('stops the server from starting on a Redis that would lose calls, saying what to change, unless FNTS_MQ_ALLOW_VOLATILE=true', async () => {
    await expect(startTestServer({ FN_NODE_TYPE: 'api', FN_MQ_URL: volatile.url })).rejects.toThrow(
      /would lose queued detached calls when it restarts \(appendonly no, appendfsync everysec, save ''\): turn on its append-only file: appendonly yes with appendfsync everysec .*; or set FNTS_MQ_ALLOW_VOLATILE=true/,
    );
    const s = await startTestServer({ FN_NODE_TYPE: 'api', FN_MQ_URL: volatile.url, FNTS_MQ_ALLOW_VOLATILE: 'true' });
    await s.close();
    const durable = await startTestServer({ FN_NODE_TYPE: 'api', FN_MQ_URL: redis.url });
    await durable.close();
  });
});

describe('calls a queue lost (the reconciler)', () => {
  const dir = mkdtempSync(join(tmpdir(), 'fnts-reconcile-'));
  let ds: SqlDatastore;
  beforeAll(async () => {
    ds = await openSqlite(join(dir, 'fn.db'));
  });
  afterAll(async () => {
    await ds?.close();
    rmSync(dir, { recursive: true, force: true });
  });

  const queued = (id: string, createdAt: number): CallRecord => ({
    id,
    status: 'queued',
    app_id: 'a1',
    app_name: 'app',
    fn_id: 'f1',
    path: '/invoke/f1',
    created_at: new Date(createdAt).toISOString(),
    stats: [],
    timings: { wait_ms: 0, exec_ms: 0 },
    attempts: 0,
  });

  it('marks failed, with the reason, the queued calls a restarted Redis without persistence lost, and only those', async () => {
    const queue = new RedisQueue(volatile.url, `fnts-test:${process.pid}:lost:`);
    const now = Date.now();
    const old = now - 5 * 60_000;
    try {
      await queue.enqueue(item('lost'));
      await volatile.restart();
      expect(await eventually(async () => (await queue.size().catch(() => -1)) === 0, 10_000)).toBe(true);
      await queue.enqueue(item('waiting'));
      const ran: CallRecord = { ...queued('ran', old), status: 'success', completed_at: new Date(old).toISOString() };
      await ds.calls.insert([queued('lost', old), queued('waiting', old), queued('young', now - 1000), ran]);
      const reconciler = new QueueReconciler({ queue, calls: ds.calls, log: pino({ level: 'silent' }), retentionMs: 24 * 3600_000, now: () => now });
      expect(await reconciler.runOnce()).toEqual({ lost: 1, pruned: 0 });
      expect(await ds.calls.getCall('f1', 'lost')).toMatchObject({ status: 'error', error: LOST_REASON, completed_at: new Date(now).toISOString() });
      // Still in the queue; just written (it may be on its way in); ended: left alone.
      expect((await ds.calls.getCall('f1', 'waiting')).status).toBe('queued');
      expect((await ds.calls.getCall('f1', 'young')).status).toBe('queued');
      expect(await ds.calls.getCall('f1', 'ran')).toEqual(ran);
      // A second pass (or a second node's) finds nothing more to do.
      expect(await reconciler.runOnce()).toEqual({ lost: 0, pruned: 0 });
    } finally {
      await queue.close();
    }
  });

  it('runs on an API node with FN_MQ_URL: a record an LB left queued for a call the queue lost says error from its first pass', async () => {
    const env = { FN_NODE_TYPE: 'api', FN_MQ_URL: redis.url, FN_DB_URL: `sqlite3://${join(dir, 'api.db')}` };
    const first = await startTestServer(env);
    const fn = await first.fn(await first.app(), 'not/run:here');
    const lost = { ...queued('01LOSTCALL0000000000000000', Date.now() - 5 * 60_000), fn_id: fn.id, app_id: fn.app_id };
    // As an LB hands in the record of a call it queued.
    expect((await first.call('/v2/runner/calls', { body: { records: [lost] } })).status).toBe(204);
    await first.close();
    const second = await startTestServer(env);
    try {
      const record = async (): Promise<any> => (await second.call(`/v2/fns/${fn.id}/calls/${lost.id}`, { method: 'GET' })).json;
      expect(await eventually(async () => (await record()).status === 'error', 10_000)).toBe(true);
      expect(await record()).toMatchObject({ status: 'error', error: LOST_REASON });
    } finally {
      await second.close();
    }
  });
});
