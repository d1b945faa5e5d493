import { describe, expect, it } from 'vitest';
import type { CallSpanRecord } from '../agent/index.js';
import { spansOf } from './span-export.js';

interface Made {
  name: string;
  spanContext(): { traceId: string; spanId: string; traceState?: { serialize(): string } };
  parentSpanContext?: { spanId: string; isRemote?: boolean };
  startTime: [number, number];
  endTime: [number, number];
  attributes: Record<string, unknown>;
  links: Array<{ context: { spanId: string } }>;
  status: { code: number; message?: string };
}

const base: CallSpanRecord = {
  kind: 'call',
  traceId: '4bf92f3577b34da6a3ce929d0e0e4736',
  spanId: '00000000000000aa',
  parentSpanId: '00f067aa0ba902b7',
  traceState: 'vendor=1',
  callId: 'C',
  appId: 'A',
  fnId: 'F',
  begun: 1_700_000_000_000,
  arrived: 1_700_000_000_000.5,
  waitEnd: 1_700_000_000_900.25,
  execStart: 1_700_000_000_900.5,
  execEnd: 1_700_000_000_950,
  ended: 1_700_000_000_951,
  startMs: 700,
  tokenMs: 100,
  cold: false,
  status: 502,
  error: 'function failed',
  linkTraceId: 'ffffffffffffffffffffffffffffffff',
  linkSpanId: '00000000000000bb',
};

function made(r: CallSpanRecord): Made[] {
  let n = 0;
  return spansOf(r, {}, { name: 'fnts' }, () => (++n).toString(16).padStart(16, '0')) as Made[];
}

const ms = (t: [number, number]): number => t[0] * 1000 + t[1] / 1e6;

describe('spans made from a call record', () => {
  it('makes the seed tree for a call that waited for a container start, linked to that start', () => {
    const spans = made(base);
    const byName = new Map(spans.map((s) => [s.name, s]));
    expect([...byName.keys()].sort()).toEqual(['agent_get_resource_token', 'agent_get_slot', 'agent_hot_exec', 'agent_launch_cold', 'agent_submit']);
    const submit = byName.get('agent_submit')!;
    expect(submit.spanContext().spanId).toBe(base.spanId);
    expect(submit.parentSpanContext).toMatchObject({ spanId: base.parentSpanId, isRemote: true });
    expect(submit.spanContext().traceState?.serialize()).toBe('vendor=1');
    expect(submit.status).toEqual({ code: 2, message: 'function failed' });
    expect(submit.attributes).toMatchObject({ 'fn.call_id': 'C', 'fn.app_id': 'A', 'fn.fn_id': 'F', 'http.response.status_code': 502 });
    const parentOf = (name: string): string | undefined => byName.get(name)!.parentSpanContext?.spanId;
    expect(parentOf('agent_get_slot')).toBe(base.spanId);
    expect(parentOf('agent_hot_exec')).toBe(base.spanId);
    expect(parentOf('agent_launch_cold')).toBe(byName.get('agent_get_slot')!.spanContext().spanId);
    expect(parentOf('agent_get_resource_token')).toBe(byName.get('agent_launch_cold')!.spanContext().spanId);
    expect(byName.get('agent_get_slot')!.links.map((l) => l.context.spanId)).toEqual(['00000000000000bb']);
    // The launch ends with the wait; its token wait comes first: 700 ms start, 100 ms for the token before it.
    const launch = byName.get('agent_launch_cold')!;
    expect(ms(launch.endTime)).toBeCloseTo(base.waitEnd, 3);
    expect(ms(launch.startTime)).toBeCloseTo(base.waitEnd - 800, 3);
    expect(ms(byName.get('agent_get_resource_token')!.endTime)).toBeCloseTo(base.waitEnd - 700, 3);
    // Every child sits inside the submit span.
    for (const s of spans) {
      expect(ms(s.startTime)).toBeGreaterThanOrEqual(ms(submit.startTime));
      expect(ms(s.endTime)).toBeLessThanOrEqual(ms(submit.endTime));
      expect(s.startTime[1]).toBeLessThan(1e9);
    }
  });

  it('makes a warm call a wait_hot with no link, and a call that never ran no exec span', () => {
    const warm = made({ ...base, startMs: NaN, linkSpanId: '', linkTraceId: '', parentSpanId: '', traceState: '', status: 200, error: '' });
    expect(warm.map((s) => s.name).sort()).toEqual(['agent_get_slot', 'agent_hot_exec', 'agent_submit', 'agent_wait_hot']);
    const submit = warm.find((s) => s.name === 'agent_submit')!;
    expect(submit.parentSpanContext).toBeUndefined();
    expect(submit.status).toEqual({ code: 0 });
    expect(warm.find((s) => s.name === 'agent_get_slot')!.links).toEqual([]);
    const refused = made({ ...base, startMs: NaN, execStart: NaN, execEnd: NaN, cold: true, status: 503, error: '' });
    expect(refused.map((s) => s.name).sort()).toEqual(['agent_get_slot', 'agent_submit', 'agent_wait_hot']);
    expect(refused.find((s) => s.name === 'agent_submit')!.status).toEqual({ code: 2 });
  });
});
