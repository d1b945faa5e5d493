import { describe, expect, it } from 'vitest';
import { seededRandom } from '../../test/support/random.js';
import { plan } from './plan.js';
import { conservative, forecast, type DemandSample, type Predictor } from './predictors.js';

const ctx = { runnerMemMb: 1000, leadMs: 10_000 };
const series = (values: readonly number[], everyMs = 1000): DemandSample[] => values.map((memMb, i) => ({ at: i * everyMs, memMb }));

describe('conservative (seed 003)', () => {
  it('wants runners for exactly the latest demand', () => {
    expect(conservative([], ctx)).toBe(0);
    expect(conservative(series([5000, 0]), ctx)).toBe(0);
    expect(conservative(series([0, 1]), ctx)).toBe(1);
    expect(conservative(series([0, 1000]), ctx)).toBe(1);
    expect(conservative(series([0, 1001]), ctx)).toBe(2);
    expect(conservative(series([0, 0, 7500]), ctx)).toBe(8);
  });
});

describe('forecast (ours)', () => {
  it("wants nothing without demand and the demand's runners once it holds steady", () => {
    expect(forecast([], ctx)).toBe(0);
    expect(forecast(series(Array(20).fill(0)), ctx)).toBe(0);
    expect(forecast(series(Array(20).fill(3000)), ctx)).toBe(3);
    expect(forecast(series(Array(20).fill(3200)), ctx)).toBe(4);
  });

  it('asks ahead of a rising demand: more runners than the demand of the moment needs', () => {
    const ramp = series(Array.from({ length: 12 }, (_, i) => 500 * i)); // +500 MB/s, 5500 MB now
    expect(conservative(ramp, ctx)).toBe(6);
    expect(forecast(ramp, ctx)).toBeGreaterThanOrEqual(9);
    // and no further than a provisioning delay's worth of the trend
    expect(forecast(ramp, ctx)).toBeLessThanOrEqual(Math.ceil((5500 + 500 * 10) / 1000));
  });

  it('ignores a spike of two ticks, which runners could not reach in time anyway', () => {
    const spike = series([...Array(20).fill(1000), 6000, 6000]);
    expect(conservative(spike, ctx)).toBe(6);
    expect(forecast(spike, ctx)).toBe(1);
  });

  it("follows a fall without projecting it: runners drain in a call's time", () => {
    const fall = series([...Array(10).fill(8000), ...Array.from({ length: 10 }, (_, i) => 8000 - 700 * (i + 1))]);
    const wanted = forecast(fall, ctx);
    expect(wanted).toBeGreaterThanOrEqual(1);
    expect(wanted).toBeLessThanOrEqual(4);
  });

  it('reads samples at any spacing: the trend is per millisecond', () => {
    const fast = series(
      Array.from({ length: 23 }, (_, i) => 250 * i),
      500,
    );
    const slow = series(
      Array.from({ length: 12 }, (_, i) => 500 * i),
      1000,
    );
    expect(Math.abs(forecast(fast, ctx) - forecast(slow, ctx))).toBeLessThanOrEqual(1);
  });
});

/**
 * A day in the life of a group, one tick a second: a base load with noise,
 * bursts that build over 8-20 s, hold and fade, and short spikes of a
 * second or two. Demand in MB (128 MB calls).
 */
function bursty(seed: number, seconds: number): number[] {
  const random = seededRandom(seed);
  const out: number[] = [];
  let burst: { start: number; rise: number; hold: number; fall: number; peak: number } | undefined;
  let spikeLeft = 0;
  let spike = 0;
  for (let t = 0; t < seconds; t++) {
    if (!burst || t > burst.start + burst.rise + burst.hold + burst.fall + 20) {
      if (random() < 0.04) burst = { start: t, rise: 8 + Math.floor(random() * 12), hold: 10 + Math.floor(random() * 30), fall: 5 + Math.floor(random() * 15), peak: 3000 + random() * 9000 };
    }
    let b = 0;
    if (burst) {
      const s = t - burst.start;
      if (s < burst.rise) b = (burst.peak * s) / burst.rise;
      else if (s < burst.rise + burst.hold) b = burst.peak;
      else if (s < burst.rise + burst.hold + burst.fall) b = burst.peak * (1 - (s - burst.rise - burst.hold) / burst.fall);
    }
    if (spikeLeft === 0 && random() < 0.03) {
      spikeLeft = 1 + Math.floor(random() * 2);
      spike = 2000 + random() * 4000;
    }
    const s = spikeLeft > 0 ? spike : 0;
    if (spikeLeft > 0) spikeLeft--;
    out.push(Math.max(0, 800 + b + s + (random() - 0.5) * 400));
  }
  return out;
}

interface SimResult {
  /** Calls (128 MB each, a second long) that found no room: the LB's 503s. */
  readonly refused: number;
  /** Runner-seconds paid for: starting, active and draining runners, each second. */
  readonly runnerSeconds: number;
}

/**
 * The manager's loop, replayed: each second the LBs' demand is sampled, the
 * predictor sets a target, `plan` decides; a provisioned runner takes calls
 * `delayS` later; a drained one is gone two seconds later (its calls finish,
 * the drain grace passes) unless taken back first.
 */
function simulate(predictor: Predictor, demand: readonly number[], delayS: number): SimResult {
  type R = { state: 'coming' | 'active' | 'draining'; at: number };
  const runners: R[] = [{ state: 'active', at: -1 }];
  const history: DemandSample[] = [];
  let refused = 0;
  let runnerSeconds = 0;
  demand.forEach((d, t) => {
    for (const r of runners) if (r.state === 'coming' && r.at <= t) r.state = 'active';
    for (let i = runners.length - 1; i >= 0; i--) if (runners[i]!.state === 'draining' && t - runners[i]!.at >= 2) runners.splice(i, 1);
    const active = runners.filter((r) => r.state === 'active');
    refused += Math.max(0, d - active.length * ctx.runnerMemMb) / 128;
    history.push({ at: t * 1000, memMb: d });
    const target = Math.min(40, Math.max(1, predictor(history, { ...ctx, leadMs: delayS * 1000 })));
    const draining = runners.filter((r) => r.state === 'draining');
    const p = plan({ active: active.length, coming: runners.filter((r) => r.state === 'coming').length, draining: draining.length, target, maxProvision: 20 });
    for (const r of draining.sort((a, b) => b.at - a.at).slice(0, p.reactivate)) r.state = 'active';
    for (const r of active.slice(-p.drain || active.length).slice(0, p.drain)) Object.assign(r, { state: 'draining', at: t });
    for (let i = 0; i < p.provision; i++) runners.push({ state: 'coming', at: t + delayS });
    runnerSeconds += runners.length;
  });
  return { refused: Math.round(refused), runnerSeconds };
}

describe('a bursty trace through both predictors (simulated, 128 MB calls, 1000 MB runners)', () => {
  it("ours refuses fewer calls than seed 003's with no more runner-seconds, for runners that start in 2 to 5 s", () => {
    const rows: string[] = [];
    const sum = (rs: readonly SimResult[]): SimResult => ({ refused: rs.reduce((n, r) => n + r.refused, 0), runnerSeconds: rs.reduce((n, r) => n + r.runnerSeconds, 0) });
    const line = (what: string, a: SimResult, b: SimResult): string =>
      `  ${what}: conservative ${a.refused} refused / ${a.runnerSeconds} runner-s; forecast ${b.refused} refused / ${b.runnerSeconds} runner-s (${Math.round((100 * (b.refused - a.refused)) / a.refused)}% refused, ${Math.round((100 * (b.runnerSeconds - a.runnerSeconds)) / a.runnerSeconds)}% runner-s)`;
    // Seeds the tuning never saw (it used 1 to 6).
    const traces = [7, 8, 9, 10, 11, 12].map((seed) => bursty(seed, 1800));
    for (const delayS of [2, 5, 10]) {
      const seed = sum(traces.map((t) => simulate(conservative, t, delayS)));
      const ours = sum(traces.map((t) => simulate(forecast, t, delayS)));
      rows.push(line(`runners start in ${delayS}s`, seed, ours));
      expect(ours.refused, rows.at(-1)).toBeLessThan(seed.refused * 0.95);
      // A longer delay makes every overshoot at a burst's end dearer: there ours buys its fewer 503s with runner-seconds (printed, not asserted).
      if (delayS <= 5) expect(ours.runnerSeconds, rows.at(-1)).toBeLessThanOrEqual(seed.runnerSeconds);
    }
    console.log(`predictors on simulated bursty demand (six traces of 30 min):\n${rows.join('\n')}`);
  });
});
