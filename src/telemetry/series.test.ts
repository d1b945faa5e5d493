import { Registry } from 'prom-client';
import { describe, expect, it } from 'vitest';
import { CellHistogram, CellMetric } from './series.js';

describe('cell series', () => {
  it('expose counters and cumulative histograms in the text format, one series per label set', async () => {
    const registry = new Registry();
    const calls = new CellMetric('counter', 'fn_calls', 'Calls', ['app_id', 'fn_id']);
    const wait = new CellHistogram('wait_seconds', 'Wait', ['fn_id'], [0.1, 1]);
    registry.registerMetric(calls as never);
    registry.registerMetric(wait as never);
    const a = calls.cell('A', 'F1');
    a.value++;
    a.value++;
    expect(calls.cell('A', 'F1')).toBe(a);
    calls.cell('A', 'F2').value++;
    const w = wait.cell('F1');
    for (const v of [0.05, 0.5, 3]) wait.observe(w, v);
    const text = await registry.metrics();
    expect(text).toContain('# TYPE fn_calls counter');
    expect(text).toContain('fn_calls{app_id="A",fn_id="F1"} 2');
    expect(text).toContain('fn_calls{app_id="A",fn_id="F2"} 1');
    expect(text).toContain('wait_seconds_bucket{fn_id="F1",le="0.1"} 1');
    expect(text).toContain('wait_seconds_bucket{fn_id="F1",le="1"} 2');
    expect(text).toContain('wait_seconds_bucket{fn_id="F1",le="+Inf"} 3');
    expect(text).toContain('wait_seconds_sum{fn_id="F1"} 3.55');
    expect(text).toContain('wait_seconds_count{fn_id="F1"} 3');
    calls.drop('fn_id', 'F2');
    expect(await registry.metrics()).not.toContain('F2');
  });
});
