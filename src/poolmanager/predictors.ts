/**
 * Predictors: a group's recent demand (the memory its LBs said their calls
 * need, one sample per scale tick, oldest first) in, the number of runners
 * to aim for out. Pure functions, so a trace can be replayed through them.
 *
 * - `conservative` (Fn's 2018 poolmanager/manager.go): exactly the latest
 *   demand. Every rise is answered only once it is seen, so a burst is short
 *   of runners for the whole provisioning delay; and a spike too short to
 *   outlast that delay still gets runners, which arrive after it ended.
 * - `forecast` (ours): the demand a provisioning delay ahead, read robustly.
 *   A spike of a tick or two moves nothing (a runner asked for it would
 *   arrive after it ended), a rise held for three ticks is projected ahead,
 *   so runners are asked for while a burst builds, before it peaks. A
 *   falling trend is not projected: runners drain in about a call's time,
 *   there is no need to remove them early.
 */

/** The demand of a group at one moment. */
export interface DemandSample {
  /** ms */
  readonly at: number;
  /** The memory (MB) the group's calls need, summed over the LBs. */
  readonly memMb: number;
}

export interface PredictorContext {
  /** The memory (MB) one runner offers to calls. */
  readonly runnerMemMb: number;
  /** How long a runner takes from being asked for to taking calls (ms). */
  readonly leadMs: number;
}

/** Runners wanted for the demand so far (`history`, oldest first); 0 for no history. Must be pure. */
export type Predictor = (history: readonly DemandSample[], ctx: PredictorContext) => number;

export const PREDICTOR_NAMES = ['conservative', 'forecast'] as const;
export type PredictorName = (typeof PREDICTOR_NAMES)[number];

function runnersFor(memMb: number, ctx: PredictorContext): number {
  return Math.max(0, Math.ceil(memMb / ctx.runnerMemMb - 1e-9));
}

/** Seed 003's predictor: runners for exactly the latest demand. */
export const conservative: Predictor = (history, ctx) => runnersFor(history.at(-1)?.memMb ?? 0, ctx);

/** The forecast's tuning (FORECAST_TUNING is what `forecast` uses). */
export interface ForecastTuning {
  /** How many of the latest samples the trend is read from. */
  readonly window: number;
  /** How much of the trend is projected (0..1): all of it overshoots at the end of every burst. */
  readonly damping: number;
}

/** Tuned on simulated bursty traces (predictors.test.ts) with provisioning delays of 2 to 10 s. */
export const FORECAST_TUNING: ForecastTuning = { window: 8, damping: 0.6 };

function median(values: number[]): number {
  const sorted = values.slice().sort((a, b) => a - b);
  const mid = sorted.length >> 1;
  return sorted.length % 2 === 1 ? sorted[mid]! : (sorted[mid - 1]! + sorted[mid]!) / 2;
}

/**
 * Ours, tuned by `t`. The trend is the Theil-Sen slope of the latest
 * `window` samples (the median of the slopes between every pair of them),
 * the level the median of the samples carried to now along it: a spike or
 * a dip of less than a third of the window moves neither, while a rise is
 * seen after three samples. A rising trend is projected `leadMs` ahead.
 */
export function forecastWith(t: ForecastTuning): Predictor {
  return (history, ctx) => {
    const recent = history.slice(-t.window);
    const last = recent.at(-1);
    if (!last) return 0;
    const slopes: number[] = [];
    for (let i = 0; i < recent.length; i++) {
      for (let j = i + 1; j < recent.length; j++) slopes.push((recent[j]!.memMb - recent[i]!.memMb) / Math.max(1, recent[j]!.at - recent[i]!.at));
    }
    const slope = slopes.length > 0 ? median(slopes) : 0; // MB per ms
    const level = median(recent.map((s) => s.memMb + slope * (last.at - s.at)));
    return runnersFor(level + t.damping * Math.max(0, slope) * ctx.leadMs, ctx);
  };
}

export const forecast: Predictor = forecastWith(FORECAST_TUNING);

export const PREDICTORS: Readonly<Record<PredictorName, Predictor>> = { conservative, forecast };
