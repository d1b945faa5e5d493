/**
 * Placers: which runner an LB tries first for a call, and which next.
 *
 * The LB asks a placer for one round of candidates (order()), tries them in
 * turn until one accepts the call, and tells the placer how each attempt went
 * (report()). When every runner refused, the LB waits a little and asks for
 * another round, until the call's placement deadline.
 *
 * Rules every placer MUST keep:
 * - order() is synchronous, cheap (it runs once per call) and never throws;
 *   it returns each runner of `runners` at most once, and only runners that
 *   are up. It may return fewer (an empty round means "none can take it now").
 * - report() never throws and never blocks.
 * - A placer keeps no reference to a runner the pool no longer lists beyond
 *   what its next order() call replaces (a stale key is harmless).
 */

/** What a placer may know of a runner: its address, whether it is up and this LB's load on it. */
export interface RunnerView {
  /** host:port, stable for the runner's life: the placers' key. */
  readonly address: string;
  /** False while the LB holds it down (it refused connections or failed a stream); order() skips it. */
  readonly up: boolean;
  /** Calls this LB has in flight on the runner now. */
  readonly inFlight: number;
}

/** How one attempt to place a call on a runner went. */
export type AttemptReport =
  /**
   * The runner refused it before running it (503: no capacity, or draining).
   * `roomMs`: how long until it could make room for the call, when it said
   * (fnts runners do: evicting idle containers of other fns once they are
   * idle FN_EJECT_IDLE_MSECS).
   */
  | { readonly kind: 'refused'; readonly roomMs?: number | undefined }
  /** The runner could not be reached, or the stream broke before the call was committed. */
  | { readonly kind: 'failed' }
  /**
   * The runner ran the call. `waitMs`: how long it waited there for a
   * container (CallFinished.schedulerDuration); `startMs`: set when the call
   * had to start a container, how long that took (image, create, start).
   */
  | { readonly kind: 'ran'; readonly waitMs: number; readonly startMs?: number };

export interface Placer {
  /** FN_PLACER's value for it. */
  readonly name: PlacerName;
  /**
   * One round of runners to try for a call of fn `fnId`, best first.
   * `runners` is the pool's list in its stable order (the same order on
   * every LB for the same list, so that hashing agrees across LBs).
   */
  order(fnId: string, runners: readonly RunnerView[]): RunnerView[];
  /** How an attempt on `runner` for fn `fnId` went. */
  report(fnId: string, runner: RunnerView, report: AttemptReport): void;
}

export type PlacerName = 'naive' | 'ch' | 'wait';
export const PLACER_NAMES: readonly PlacerName[] = ['naive', 'ch', 'wait'];
