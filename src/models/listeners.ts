/**
 * The rule every listener and hook in fnts is held to (CONVENTIONS,
 * "Callbacks have written rules"): it is told synchronously, must be cheap
 * and must not throw; one that throws anyway is logged and skipped, and the
 * caller and the other listeners go on as if it had returned.
 *
 * It lives in models/ because every layer that tells listeners (the change
 * feed here, the agent, the LB, the runner, the pool manager) already
 * depends on models/ and models/ on none of them: one place for the rule,
 * with no new module for one function.
 */

/** Where a listener's fault is logged (a pino Logger is one). */
export interface ListenerFaultLog {
  error(fields: object, message: string): void;
}

/**
 * Tells each of `listeners` (undefined ones are skipped) by `tell`; one that
 * throws is logged as "`who` threw; it is skipped (listeners must not
 * throw)", with `fields` beside the error, and skipped. Without a `log` the
 * fault is only skipped. Never throws.
 */
export function tellEach<L>(listeners: Iterable<L | undefined> | undefined, tell: (listener: L) => void, log: ListenerFaultLog | undefined, who: string, fields?: object): void {
  if (listeners === undefined) return;
  for (const listener of listeners) {
    if (listener === undefined) continue;
    try {
      tell(listener);
    } catch (err) {
      log?.error({ err, ...fields }, `${who} threw; it is skipped (listeners must not throw)`);
    }
  }
}
