/**
 * The keep-alive simulator on one seeded Azure-like day (issue 27's "done
 * when"): the direction of the histogram policy's gains, not exact values.
 */
import { describe, expect, it } from 'vitest';
import { adversarialTraces, azureLikeTrace, defaultRuns, simulate, standardRuns, table } from './keepalive-sim.mjs';

describe('the keep-alive simulator', () => {
  it('histogram: fewer cold starts than fixed keep-alive for the 75th-percentile fn, for less memory than 10 minutes', () => {
    const trace = azureLikeTrace(27, 150);
    const [fixed30s, fixed10min, histogram] = standardRuns().map((r) => simulate(trace, r));
    console.log(table([fixed30s!, fixed10min!, histogram!]));
    // Against a fixed 10 minutes: fewer cold starts at the 75th-percentile fn, at most the same memory-time.
    expect(histogram!.coldShareAt.p75).toBeLessThan(fixed10min!.coldShareAt.p75);
    expect(histogram!.coldShareAt.p50).toBeLessThan(fixed10min!.coldShareAt.p50);
    expect(histogram!.wastedGbS).toBeLessThanOrEqual(fixed10min!.wastedGbS);
    // Against Fn's 30 s: far fewer cold starts (a third at most) for a bounded memory increase (at most 4 times).
    expect(histogram!.cold).toBeLessThan(fixed30s!.cold / 3);
    expect(histogram!.coldShareAt.p50).toBeLessThan(fixed30s!.coldShareAt.p50 / 2);
    expect(histogram!.wastedGbS).toBeLessThan(fixed30s!.wastedGbS * 4);
    // The policy's cost per decision, measured on every decision.
    expect(histogram!.decisionMeanMs).toBeLessThan(1);
    expect(histogram!.decisionP99Ms).toBeLessThan(1);
  });

  it("at Fn's default idle_timeout of 30 s, the default policy (histogram) has fewer cold starts than fixed, for no more memory", () => {
    const trace = azureLikeTrace(27, 100);
    const [fixed, histogram] = defaultRuns().map((r) => simulate(trace, r));
    console.log(table([fixed!, histogram!]));
    expect(histogram!.cold).toBeLessThan(fixed!.cold * 0.9);
    expect(histogram!.coldShareAt.p50).toBeLessThan(fixed!.coldShareAt.p50);
    expect(histogram!.wastedGbS).toBeLessThanOrEqual(fixed!.wastedGbS);
  });

  it('the adversarial cases: a periodic fn stays warm for a fraction of the memory; a one-off fn costs what fixed costs', () => {
    const [periodic, , drifting, oneOff] = adversarialTraces(27);
    const [, fixed10min, histogram] = standardRuns();
    const p = [fixed10min!, histogram!].map((r) => simulate([periodic!], r));
    expect(p[1]!.cold).toBeLessThanOrEqual(p[0]!.cold);
    expect(p[1]!.wastedGbS).toBeLessThan(p[0]!.wastedGbS / 2);
    const d = [fixed10min!, histogram!].map((r) => simulate([drifting!], r));
    expect(d[1]!.cold).toBeLessThan(d[0]!.cold);
    const o = [fixed10min!, histogram!].map((r) => simulate([oneOff!], r));
    expect(o[1]!.wastedGbS).toBe(o[0]!.wastedGbS);
  });

  it('the generator is seeded: the same seed, the same trace', () => {
    expect(azureLikeTrace(5, 20)).toEqual(azureLikeTrace(5, 20));
    expect(azureLikeTrace(5, 20)).not.toEqual(azureLikeTrace(6, 20));
  });
});
