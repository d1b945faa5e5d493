/**
 * What the roles that run calls tell of each (the local agent as it runs
 * it, an LB as a runner reports it): for metrics, call records, syslog.
 */
import type { Call, CallOutcome } from '../models/index.js';

/**
 * Hooks around every call, for metrics and call records.
 *
 * Rules: a listener is called synchronously on the call's path, so it must
 * be cheap and must not block (hand slow work, like storing a record, to a
 * queue of its own). It must not throw: one that does is logged and
 * skipped, and the call, the other listeners and shutdown go on as if it
 * had returned.
 */
export interface CallListener {
  onCallStart?(call: Call): void;
  /** A container began working on the call (it waited until now). */
  onCallExec?(call: Call): void;
  /** `logFollows`: onCallLog will be told for this call, after this (its record can wait for it). */
  onCallEnd?(call: Call, outcome: CallOutcome, logFollows?: boolean): void;
  /** What the container wrote during the call (capped), once its container has moved on: shortly after onCallEnd. */
  onCallLog?(call: Call, log: string): void;
}
