/**
 * The calls API (Fn's v2 calls contract) on a real server with real
 * containers: every call leaves a record and its log, found newest first,
 * by id, and by time, with Fn's errors.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { openSqlDatastore } from '../../src/datastore/index.js';
import { probeImage } from '../support/functions.js';
import { startTestServer, type TestServer } from '../support/server.js';
import { eventually } from '../support/wait.js';
import { withTestToken } from '../support/auth.js';

describe('the calls API', () => {
  let s: TestServer;
  let fn: any;
  const ids: string[] = [];

  const get = async (path: string, headers: Record<string, string> = {}) => {
    const res = await fetch(s.url + path, { headers: withTestToken(path, headers) });
    const text = await res.text();
    let json: any;
    try {
      json = JSON.parse(text);
    } catch {
      json = undefined;
    }
    return { status: res.status, type: res.headers.get('content-type') ?? '', text, json };
  };

  beforeAll(async () => {
    s = await startTestServer();
    const app = await s.app();
    fn = await s.fn(app, await probeImage(), { timeout: 1 });
    for (const body of [{ log: 'first' }, { log: 'second' }, { sleep: 1500 }]) {
      const res = await s.invoke(fn.id, body);
      ids.push(res.headers.get('fn-call-id')!);
      // Output can trail the answer (the engine carries stdout and stderr apart): what comes after the
      // next call began on the container is that call's. Calls here are spaced past the grace.
      await new Promise((r) => setTimeout(r, 400));
    }
    // Records are written in batches, off the call path.
    const stored = await eventually(async () => (await get(`/v2/fns/${fn.id}/calls`)).json?.items?.length === 3, 5000);
    expect(stored).toBe(true);
  });
  afterAll(async () => {
    await s?.close();
  });

  it("lists a fn's calls newest first, with Fn's fields, page by page", async () => {
    const all = await get(`/v2/fns/${fn.id}/calls`);
    expect(all.status).toBe(200);
    expect(all.json.items.map((c: any) => c.id)).toEqual([...ids].reverse());
    expect(all.json.items[0]).toMatchObject({ id: ids[2], status: 'timeout', error: 'Timed out', app_id: fn.app_id, fn_id: fn.id });
    expect(all.json.items[2]).toMatchObject({ id: ids[0], status: 'success' });
    for (const c of all.json.items) {
      expect(Date.parse(c.created_at)).toBeGreaterThan(0);
      expect(Date.parse(c.completed_at)).toBeGreaterThanOrEqual(Date.parse(c.created_at));
    }
    const first = await get(`/v2/fns/${fn.id}/calls?per_page=2`);
    expect(first.json.items).toHaveLength(2);
    const rest = await get(`/v2/fns/${fn.id}/calls?per_page=2&cursor=${first.json.next_cursor}`);
    expect(rest.json.items.map((c: any) => c.id)).toEqual([ids[0]]);
    expect(rest.json.next_cursor).toBeUndefined();
  });

  it('filters by created_at in Unix seconds, and refuses what is not an epoch time', async () => {
    const later = Math.ceil(Date.now() / 1000) + 60;
    expect((await get(`/v2/fns/${fn.id}/calls?from_time=${later}`)).json.items).toEqual([]);
    expect((await get(`/v2/fns/${fn.id}/calls?to_time=${later}&from_time=0`)).json.items).toHaveLength(3);
    expect(await get(`/v2/fns/${fn.id}/calls?from_time=yesterday`)).toMatchObject({ status: 400, json: { message: 'from_time is not an epoch time' } });
    expect(await get(`/v2/fns/${fn.id}/calls?to_time=-5`)).toMatchObject({ status: 400, json: { message: 'to_time is not an epoch time' } });
  });

  it("shows one call, and answers Fn's 404s", async () => {
    expect(await get(`/v2/fns/${fn.id}/calls/${ids[1]}`)).toMatchObject({ status: 200, json: { id: ids[1], status: 'success', fn_id: fn.id } });
    expect(await get(`/v2/fns/${fn.id}/calls/01NOPE`)).toMatchObject({ status: 404, json: { message: 'Call not found' } });
    expect(await get(`/v2/fns/01NOFN/calls/${ids[1]}`)).toMatchObject({ status: 404, json: { message: 'Fn not found' } });
    expect(await get('/v2/fns/01NOFN/calls')).toMatchObject({ status: 404, json: { message: 'Fn not found' } });
  });

  it("serves a call's log as JSON or plain text, and refuses what it cannot serve", async () => {
    const json = await get(`/v2/fns/${fn.id}/calls/${ids[0]}/log`);
    expect(json.status).toBe(200);
    expect(json.json.call_id).toBe(ids[0]);
    expect(json.json.log).toContain('first (stderr)');
    expect(json.json.log).not.toContain('second');
    const text = await get(`/v2/fns/${fn.id}/calls/${ids[1]}/log`, { Accept: 'text/plain' });
    expect(text.type).toMatch(/^text\/plain/);
    expect(text.text).toContain('second (stdout)');
    expect((await get(`/v2/fns/${fn.id}/calls/${ids[1]}/log`, { Accept: 'image/png' })).status).toBe(406);
    expect(await get(`/v2/fns/${fn.id}/calls/01NOPE/log`)).toMatchObject({ status: 404, json: { message: 'Call log not found' } });
  });

  it("never shows a call's record before its log: the moment the record is there, so is the log", async () => {
    for (const n of [1, 2, 3]) {
      const res = await s.invoke(fn.id, { log: `log then record ${n}` });
      const id = res.headers.get('fn-call-id')!;
      // Looked at as often as a client might, from the answer on.
      let record: { status: number } | undefined;
      expect(
        await eventually(
          async () => {
            record = await get(`/v2/fns/${fn.id}/calls/${id}`);
            return record.status === 200;
          },
          15_000,
          5,
        ),
      ).toBe(true);
      const log = await get(`/v2/fns/${fn.id}/calls/${id}/log`);
      expect(log.status).toBe(200);
      expect(log.json.log).toContain(`log then record ${n} (stderr)`);
    }
  });
});

describe('call records across a stop', () => {
  it('stores the records and logs of the last calls before the server stops', async () => {
    const s = await startTestServer();
    const app = await s.app();
    const fn = await s.fn(app, await probeImage());
    const res = await s.invoke(fn.id, { log: 'just before the stop' });
    const id = res.headers.get('fn-call-id')!;
    // At once: the record is still in the recorder's buffer and the log still open.
    await s.server.close();
    const ds = await openSqlDatastore(s.config.dbUrl);
    try {
      expect(await ds.calls.getCall(fn.id, id)).toMatchObject({ id, status: 'success' });
      expect(await ds.calls.getLog(fn.id, id)).toContain('just before the stop (stderr)');
    } finally {
      await ds.close();
      await s.close();
    }
  });
});
