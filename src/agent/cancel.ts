/**
 * A call's cancel: one per call, whatever phase the call is in.
 *
 * It answers like an AbortSignal (`aborted`, `reason`) and gives one on
 * demand (`signal`) to the phases that wait on others' APIs (a wait for a
 * container, an image pull). It is not an AbortSignal itself because making
 * one, and listening to it, costs more per call than the rest of a hot
 * call's bookkeeping (measured: about 7 us per call, 5% of the server's
 * CPU for a one-connection load); a call served by an idle container never
 * needs one.
 */
import { cancelError, type CancelReason } from '../call/index.js';

export class CallCancel {
  private why: unknown;
  private reasonKind: CancelReason | undefined;
  private controller: AbortController | undefined;
  private listener: ((reason: unknown) => void) | undefined;

  get aborted(): boolean {
    return this.why !== undefined;
  }

  /** The error the call ends with (cancelError of the kind): what waits reject with. */
  get reason(): unknown {
    return this.why;
  }

  /** Why it was cancelled; undefined while it is not. */
  get kind(): CancelReason | undefined {
    return this.reasonKind;
  }

  /** An AbortSignal that aborts with this cancel (made on first use). */
  get signal(): AbortSignal {
    if (!this.controller) {
      this.controller = new AbortController();
      if (this.why !== undefined) this.controller.abort(this.why);
    }
    return this.controller.signal;
  }

  /**
   * Who acts on the cancel in the current phase (one at a time; undefined:
   * nobody). Called once, synchronously, when the call is cancelled; must
   * not throw.
   */
  listen(listener: ((reason: unknown) => void) | undefined): void {
    this.listener = listener;
  }

  /** Cancels once; later cancels change nothing. */
  cancel(kind: CancelReason): void {
    if (this.why !== undefined) return;
    this.reasonKind = kind;
    const reason = cancelError(kind);
    this.why = reason;
    this.controller?.abort(reason);
    const listener = this.listener;
    this.listener = undefined;
    listener?.(reason);
  }
}
