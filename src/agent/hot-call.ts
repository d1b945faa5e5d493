/**
 * One call on a hot container, phase by phase:
 *
 *   waiting ──container──▶ claimed ──sent──▶ running ──answered──▶ streaming ──▶ done
 *      │                      │                 │                       │
 *      └── cancel: stop       └── cancel: give   └── cancel: abandon      └── cancel: drop the
 *          waiting                the container      (the function may        rest of the answer
 *                                 back untouched     finish; the container
 *                                                    then returns), or cut
 *                                                    it (server stopping)
 *
 * The call's one cancel (CallCancel) reaches whoever acts in the current
 * phase; what a cancel does depends on the phase it finds. The deadline (the fn's timeout, counted from when
 * a container was ready for the call if it waited for one past its slot
 * deadline) cuts the exchange and retires the container.
 */
import type { Readable } from 'node:stream';
import { ApiError, E, FunctionError } from '../models/index.js';
import { Deadline } from '../time/index.js';
import { FdkReportedError } from './protocol/http-stream.js';
import type { CallCancel } from './cancel.js';
import type { HotContainer } from './hot.js';
import type { SlotPool } from './pool.js';
import { untilSlotDeadline } from './pool.js';
import type { CallRequest, CallResponse, Exchange } from './protocol/call.js';
import type { FunctionSpec } from './spec.js';
import { statusOf, type CallTrace } from './trace.js';

type Phase = 'waiting' | 'claimed' | 'running' | 'streaming' | 'done';

/**
 * Runs `req` on a container of `pool` until the slot deadline (503 Timed out
 * - server too busy) and the fn's timeout (504). `signal` is the call's cancel.
 */
export async function runHotCall(pool: SlotPool, req: CallRequest, signal: CallCancel, trace: CallTrace, statsIntervalMs: number): Promise<CallResponse> {
  const call = new HotCall(pool, req, signal, trace);
  return call.run(statsIntervalMs);
}

class HotCall {
  private phase: Phase = 'waiting';
  private container: HotContainer | undefined;
  private exchange: Exchange | undefined;
  /** The fn's timeout, once the call has its container. */
  private timeout: Deadline | undefined;
  private runStart = 0;
  private finished = false;
  private abandoned = false;
  private response: CallResponse | undefined;
  private readonly spec: FunctionSpec;
  /** The keep-alive policy has heard of the call's end (once, whichever way it ends). */
  private told = false;

  constructor(
    private readonly pool: SlotPool,
    private readonly req: CallRequest,
    private readonly signal: CallCancel,
    private readonly trace: CallTrace,
  ) {
    this.spec = pool.spec;
  }

  /** The call ran past the fn's timeout. */
  private get timedOut(): boolean {
    return this.timeout?.expired ?? false;
  }

  async run(statsIntervalMs: number): Promise<CallResponse> {
    const { pool, signal, trace } = this;
    let deadline = Date.now() + this.spec.timeoutMs;
    let container: HotContainer;
    pool.callStarted();
    try {
      const idle = pool.queue.tryAcquire();
      if (idle) container = idle;
      else {
        const waited = await this.waitForContainer();
        container = waited.container;
        // It waited past its slot deadline for a container started for it:
        // the start is the platform's time, the fn's timeout is the function's.
        if (waited.overdue) deadline = Date.now() + this.spec.timeoutMs;
      }
    } catch (err) {
      this.callEnded();
      trace.end(statusOf(err), err);
      pool.dropIfEmpty();
      throw err;
    }
    this.container = container;
    pool.queue.record('wait', trace.waited());
    if (signal.aborted) {
      // The caller left while the container was on its way.
      this.callEnded();
      pool.offer(container);
      trace.end(statusOf(signal.reason), signal.reason);
      throw signal.reason;
    }

    this.phase = 'claimed';
    pool.queue.enter('run');
    this.runStart = performance.now();
    signal.listen((reason) => this.onCancel(reason));
    this.timeout = Deadline.at(deadline, () => this.exchange?.cancel(new FunctionError(E.CallTimeout)));
    try {
      return await this.exec(new Date(deadline), statsIntervalMs);
    } finally {
      if ((this.phase as Phase) !== 'streaming') signal.listen(undefined);
    }
  }

  /**
   * Waits for a container until the slot deadline (half the fn's timeout;
   * then 503), or past it while a container is being started for this call,
   * or until the caller cancels (its reason is thrown).
   */
  private waitForContainer(): Promise<{ container: HotContainer; overdue: boolean }> {
    const cancel = this.signal.signal;
    return untilSlotDeadline(this.spec, cancel, (deadline) => this.pool.acquire(cancel, deadline, this.req.call.type === 'detached'));
  }

  private async exec(deadline: Date, statsIntervalMs: number): Promise<CallResponse> {
    const { signal, trace } = this;
    const container = this.container!;
    let response: CallResponse;
    try {
      const thawing = container.claim();
      if (thawing) await thawing;
      if (this.timedOut) throw new FunctionError(E.CallTimeout);
      if (signal.aborted) {
        // Cancelled before anything was sent: the container is untouched.
        this.finish();
        trace.end(statusOf(signal.reason), signal.reason);
        throw signal.reason;
      }
      if (container.takePrewarmed()) trace.prewarmed();
      trace.started(container.takeStartTimings(), (onStat, ms) => container.watchStats(onStat, ms), statsIntervalMs, container.startLink);
      this.exchange = container.exec(this.req, deadline, trace.log());
      this.phase = 'running';
      response = await this.answer(this.exchange);
    } catch (err) {
      if (signal.aborted && err === signal.reason) {
        trace.end(statusOf(err), err);
        throw err;
      }
      const explained = this.timedOut ? new FunctionError(E.CallTimeout, { cause: err }) : await container.explain(err);
      this.finish(explained);
      trace.end(statusOf(explained), explained);
      throw explained;
    }
    this.response = response;
    if (Buffer.isBuffer(response.body)) {
      this.finish();
      trace.end(response.status);
      return response;
    }
    // Streamed: the container stays with this call until the body is done.
    this.phase = 'streaming';
    const body = response.body as Readable;
    body.once('error', (err) => {
      this.finish(signal.aborted ? undefined : err);
      trace.end(502, err);
    });
    body.once('close', () => {
      this.finish(body.readableEnded || signal.aborted ? undefined : new Error('response stream not consumed'));
      trace.end(response.status);
    });
    return response;
  }

  /** The exchange's answer, or the cancel's reason as soon as the call is cancelled. */
  private answer(exchange: Exchange): Promise<CallResponse> {
    if (this.signal.aborted) return Promise.reject(this.signal.reason);
    return new Promise<CallResponse>((resolve, reject) => {
      exchange.response.then(resolve, reject);
      this.abandon = reject;
    });
  }

  private abandon: ((reason: unknown) => void) | undefined;

  private onCancel(reason: unknown): void {
    switch (this.phase) {
      case 'claimed':
        // Noticed after the thaw: nothing was sent, the container is untouched.
        return;
      case 'running': {
        const exchange = this.exchange!;
        // A stopping server cuts the exchange: the container goes.
        const hard = this.signal.kind === 'shutdown';
        if (hard) exchange.cancel(reason);
        if (this.abandoned) return;
        this.abandoned = true;
        if (!hard) {
          // Left to finish, unless the server stops meanwhile.
          const cutting = this.pool.cutting;
          const cut = (): void => exchange.cancel(cutting.reason);
          if (cutting.aborted) cut();
          else {
            cutting.addEventListener('abort', cut, { once: true });
            void exchange.response.then(
              () => cutting.removeEventListener('abort', cut),
              () => cutting.removeEventListener('abort', cut),
            );
          }
        }
        // The caller is gone, but the function is still working on its call:
        // the container stays busy until it answers (or the deadline
        // passes), then goes back to the queue as usual.
        exchange.response.then(
          (r) => {
            if (Buffer.isBuffer(r.body)) this.finish();
            else {
              r.body.once('close', () => this.finish());
              r.body.destroy();
            }
          },
          (err: unknown) => this.finish(this.timedOut ? new FunctionError(E.CallTimeout) : err),
        );
        this.abandon?.(reason);
        return;
      }
      case 'streaming': {
        // Cancelled while the answer streams: drop the rest; the function has answered, so the container is fine.
        const body = this.response?.body;
        if (body && !Buffer.isBuffer(body)) body.destroy(reason as Error);
        return;
      }
      default:
        return;
    }
  }

  private callEnded(): void {
    if (this.told) return;
    this.told = true;
    this.pool.callEnded();
  }

  /** The function is done with the call: the container goes back to its pool, or leaves service after a failure. */
  private finish(err?: unknown): void {
    if (this.finished) return;
    this.finished = true;
    this.phase = 'done';
    this.timeout?.clear();
    const container = this.container!;
    this.callEnded();
    container.endCall();
    this.trace.executed();
    this.pool.queue.exit('run', performance.now() - this.runStart);
    // A body refused for its size never reached the function, and a failure
    // the FDK reported came in a complete answer: the container is fine.
    if (err !== undefined && !ApiError.is(err, E.RequestContentTooBig) && !(err instanceof FdkReportedError)) {
      const timedOut = ApiError.is(err, E.CallTimeout);
      void container.retire(timedOut ? 'timed-out' : 'failed', `call failed: ${err instanceof Error ? err.message : String(err)}`);
    } else {
      this.pool.offer(container);
    }
  }
}
