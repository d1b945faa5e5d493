import { describe, expect, it } from 'vitest';
import { callFn, callFromJson, callRecord, callToJson, FnInterner, pathOf, type Call } from './call.js';
import { newAppFromJson } from './app.js';
import { newFnFromJson } from './fn.js';
import { ApiError } from './errors.js';

function sample(): Call {
  const app = { ...newAppFromJson({ name: 'shop', config: { DB: 'x' }, syslog_url: 'tcp://logs:514' }) };
  const fn = { ...newFnFromJson({ app_id: app.id, name: 'cart', image: 'team/cart:1', memory: 256, timeout: 20, idle_timeout: 45, config: { MODE: 'fast' } }), shape: undefined };
  return {
    id: '01JCALL',
    type: 'detached',
    fn: callFn(app, fn),
    triggerId: 'trig1',
    method: 'PUT',
    url: 'http://fnts.test/t/shop/cart?x=1',
    headers: ['Content-Type', 'application/json', 'X-Multi', 'a', 'X-Multi', 'b'],
    createdAt: Date.parse('2026-11-23T10:00:00.000Z'),
  };
}

describe('Call as Fn models.Call JSON', () => {
  it('writes the fields a runner needs under Fn names, and reads them back unchanged', () => {
    const call = sample();
    const json = callToJson(call);
    expect(json).toMatchObject({
      id: '01JCALL',
      type: 'detached',
      image: 'team/cart:1',
      method: 'PUT',
      url: 'http://fnts.test/t/shop/cart?x=1',
      timeout: 20,
      idle_timeout: 45,
      memory: 256,
      config: { DB: 'x', MODE: 'fast' },
      headers: { 'Content-Type': ['application/json'], 'X-Multi': ['a', 'b'] },
      syslog_url: 'tcp://logs:514',
      created_at: '2026-11-23T10:00:00.000Z',
      app_id: call.fn.appId,
      app_name: 'shop',
      fn_id: call.fn.fnId,
      trigger_id: 'trig1',
    });
    // Through a wire and back: what a runner runs is what the LB was asked.
    expect(callFromJson(JSON.parse(JSON.stringify(json)))).toEqual(call);
  });

  it("carries the app's runner group through the JSON (a detached call keeps it in the queue), leaving the default unwritten", () => {
    const call = sample();
    expect(call.fn.runnerGroup).toBe('default');
    expect(callToJson(call)).not.toHaveProperty('runner_group');
    const app = newAppFromJson({ name: 'gpu', annotations: { 'fnts.io/runner-group': 'gpu' } });
    const grouped = { ...call, fn: callFn(app, { ...newFnFromJson({ app_id: app.id, name: 'f', image: 'i' }), shape: undefined }) };
    expect(callToJson(grouped).runner_group).toBe('gpu');
    expect(callFromJson(JSON.parse(JSON.stringify(callToJson(grouped)))).fn.runnerGroup).toBe('gpu');
  });

  it("carries the version of the fn's secrets through the JSON (never a value), leaving none unwritten", () => {
    const call = sample();
    expect(call.fn).not.toHaveProperty('secretsVersion');
    expect(callToJson(call)).not.toHaveProperty('secrets_version');
    const app = newAppFromJson({ name: 'a' });
    const withSecrets = { ...call, fn: callFn(app, { ...newFnFromJson({ app_id: app.id, name: 'f', image: 'i' }), shape: undefined }, '0123456789abcdef') };
    expect(callToJson(withSecrets).secrets_version).toBe('0123456789abcdef');
    expect(callFromJson(JSON.parse(JSON.stringify(callToJson(withSecrets)))).fn.secretsVersion).toBe('0123456789abcdef');
    expect(() => callFromJson({ ...callToJson(withSecrets), secrets_version: '../etc' })).toThrow('Invalid call: secrets_version must be a hex digest');
  });

  it("reads a call as Fn's LB sends it: fn name and format from config, cpus in milli-CPUs, the old type name", () => {
    const call = callFromJson({
      id: 'c1',
      app_id: 'a1',
      fn_id: 'f1',
      image: 'hello:1',
      type: 'async',
      cpus: '500m',
      memory: 128,
      config: { FN_FN_NAME: 'hello', FN_APP_NAME: 'demo', FN_FORMAT: 'http-stream' },
    });
    expect(call).toMatchObject({ type: 'detached', fn: { fnName: 'hello', appName: 'demo', format: 'http-stream', cpuMillis: 500, timeoutS: 30 } });
    expect(callFromJson({ id: 'c', app_id: 'a', fn_id: 'f', image: 'i', cpus: '0.25' }).fn.cpuMillis).toBe(250);
  });

  it.each([
    [[], 'not a JSON object'],
    [{ app_id: 'a', fn_id: 'f', image: 'i' }, 'id is required'],
    [{ id: 'c', app_id: 'a', fn_id: 'f' }, 'image is required'],
    [{ id: 'c', app_id: 'a', fn_id: 'f', image: 'i', type: 'later' }, 'type later'],
    [{ id: 'c', app_id: 'a', fn_id: 'f', image: 'i', memory: -1 }, 'memory'],
    [{ id: 'c', app_id: 'a', fn_id: 'f', image: 'i', headers: { X: 'not-a-list' } }, 'headers.X'],
    [{ id: 'c', app_id: 'a', fn_id: 'f', image: 'i', cpus: 'lots' }, 'cpus'],
  ])('refuses %j with 400 naming the field', (json, words) => {
    let err: unknown;
    try {
      callFromJson(json);
    } catch (e) {
      err = e;
    }
    expect(err).toBeInstanceOf(ApiError);
    expect((err as ApiError).status).toBe(400);
    expect((err as ApiError).message).toContain(words);
  });

  it('makes a call record from a call and its outcome', () => {
    const call = sample();
    const record = callRecord(call, {
      id: call.id,
      status: 'timeout',
      httpStatus: 504,
      ran: true,
      error: 'Timed out',
      errorUser: true,
      createdAt: '2026-11-23T10:00:00.000Z',
      startedAt: '2026-11-23T10:00:00.100Z',
      completedAt: '2026-11-23T10:00:20.100Z',
      timings: { wait_ms: 100, exec_ms: 20000 },
      stats: [],
    });
    expect(record).toMatchObject({ id: '01JCALL', status: 'timeout', error: 'Timed out', path: '/t/shop/cart', app_name: 'shop', started_at: '2026-11-23T10:00:00.100Z' });
  });
});

describe('FnInterner', () => {
  it('gives the calls of one fn read from JSON one CallFn (the agent keeps its spec with it), and a changed fn its own', () => {
    const fns = new FnInterner();
    const read = (call: Call): Call => fns.share(callFromJson(JSON.parse(JSON.stringify(callToJson(call)))));
    const base = sample();
    const first = read(base);
    const second = read({ ...base, id: '01JCALL2' });
    expect(second.fn).toBe(first.fn);
    expect(second.id).toBe('01JCALL2');
    const bigger = read({ ...base, fn: { ...base.fn, memoryMB: 512 } });
    expect(bigger.fn).not.toBe(first.fn);
    expect(bigger.fn.memoryMB).toBe(512);
  });

  it('keeps at most its bound of fns, the oldest dropped first', () => {
    const fns = new FnInterner(2);
    const base = sample();
    const of = (name: string): Call => ({ ...base, fn: { ...base.fn, fnName: name } });
    const a = fns.share(of('a')).fn;
    fns.share(of('b'));
    fns.share(of('c'));
    // a was dropped: an equal fn is kept anew, not answered with the old object.
    expect(fns.share(of('a')).fn).not.toBe(a);
    const c = fns.share(of('c')).fn;
    expect(fns.share(of('c')).fn).toBe(c);
  });
});

describe('pathOf', () => {
  it.each([
    ['http://fnts.test/t/shop/cart?x=1', '/t/shop/cart'],
    ['https://h:8080/invoke/01ABC', '/invoke/01ABC'],
    ['http://h', '/'],
    ['http://h/a#frag', '/a'],
  ])('%s -> %s', (url, path) => {
    expect(pathOf(url)).toBe(path);
  });
});
