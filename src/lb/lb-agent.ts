/**
 * The LB's Invoker: runs each call on a runner over Fn's runner protocol.
 *
 *   invoke(call) -> the body, read whole (kept until the call is committed,
 *   so that it can be sent again) -> rounds of placement: the placer orders
 *   the runners that are up, each is tried in turn until one commits ->
 *   the runner's answer is the caller's.
 *
 * A call moves to another runner only before it is committed (the runner
 * refused it with 503, or could not be reached); once a runner has accepted
 * the TryCall it is never sent anywhere else. When every runner refused, the
 * next round starts after a short, growing pause, until the call's own
 * timeout has passed (then 503 Timed out - server too busy).
 *
 * A runner that cannot be reached is held down for a growing time (100 ms to
 * 5 s) and then tried again; its channel redials underneath meanwhile.
 *
 * The runners come from a RunnerPool, asked at each round for the runners
 * of the call's group: a runner that leaves the pool gets no new call, and
 * its calls in flight finish. The pool is told of each call, with its
 * memory, from its arrival until it is over (a managed pool advertises it).
 */
import type { Logger } from 'pino';
import { cancelError, sameName, serverBusy, wholeBody, type CallBody, type CallListener, type CallResponse, type CancelReason, type Invoker, type RunningCall } from '../call/index.js';
import { ApiError, callStatus, E, errorCode, tellEach, type Call, type CallOutcome } from '../models/index.js';
import { nsToMs, type CallFinishedMsg, engageRequest, type Attempt } from '../rpc/index.js';
import type { Placer, RunnerView } from './placer.js';
import type { Runner, RunnerPool } from './pool.js';

/**
 * What the LB tells about placements (metrics). Rules: called on the call's
 * path, so cheap, never blocking, never throwing (a throw is logged).
 */
export interface PlacementListener {
  /** One attempt on `runner` ended as `result` (refused, failed or committed). */
  onAttempt?(fnId: string, runner: string, result: Attempt['kind']): void;
  /** A call was committed to `runner` after `attempts` attempts, `placeMs` after it arrived. */
  onPlaced?(fnId: string, runner: string, attempts: number, placeMs: number): void;
  /** No runner took the call before its deadline. */
  onUnplaced?(fnId: string): void;
}

export interface LbAgentOptions {
  /** Where calls go; closed by close() once the calls have ended. */
  readonly pool: RunnerPool;
  readonly placer: Placer;
  readonly log: Logger;
  readonly listeners?: readonly PlacementListener[];
  /**
   * Told when each call ends and when its log arrives (call records). The
   * CallListener rules hold; onCallStart and onCallExec are not told (the
   * runner's own metrics count those). With a listener of logs, the LB asks
   * runners for each call's log.
   */
  readonly callListeners?: readonly CallListener[];
  /**
   * The values of fns' secrets (lb/secrets.ts): a call of a fn with secrets
   * (CallFn.secretsVersion) carries them to its runner, and goes only to
   * runners reached over mutual TLS or on loopback. Without: no secrets are sent.
   */
  readonly secrets?: { current(fnId: string, version: string): Promise<{ readonly version: string; readonly values: Readonly<Record<string, string>> }> };
  /** The first pause after a round where every runner refused (doubles up to 200 ms). */
  readonly retryDelayMs?: number;
}

const MAX_ROUND_PAUSE_MS = 200;

/** How a call placed on a runner ended, from the runner's CallFinished. */
function outcomeOf(call: Call, status: number, finished: CallFinishedMsg | undefined, error: unknown): CallOutcome {
  const now = new Date().toISOString();
  const f = finished;
  const httpStatus = error === undefined ? status : error instanceof ApiError ? error.status : 502;
  const outcome: { -readonly [K in keyof CallOutcome]: CallOutcome[K] } = {
    id: call.id,
    status: callStatus(httpStatus),
    httpStatus,
    errorUser: f?.errorUser ?? false,
    // The runner says when the function began the call (Fn's runners too): nothing else ran it.
    ran: !!f?.startedAt,
    createdAt: new Date(call.createdAt).toISOString(),
    completedAt: f?.completedAt || now,
    timings: {
      wait_ms: Math.round(nsToMs(f?.schedulerDuration ?? 0)),
      exec_ms: Math.round(nsToMs(f?.executionDuration ?? 0)),
      ...(f && f.initStartTime > 0 ? { image_ms: Math.round(nsToMs(f.imagePullWaitDuration)), create_ms: Math.round(nsToMs(f.ctrCreateDuration)), start_ms: Math.round(nsToMs(f.initStartTime)) } : {}),
    },
    stats: [],
  };
  if (f?.startedAt) outcome.startedAt = f.startedAt;
  if (error !== undefined) {
    outcome.error = error instanceof Error ? error.message : String(error);
    outcome.code = errorCode(error);
  }
  return outcome;
}

class LbCall implements RunningCall {
  response!: Promise<CallResponse>;
  outcome!: Promise<CallOutcome>;
  log: Promise<string> = Promise.resolve('');
  /** Set once committed: cancels on the runner. */
  onCancel: (() => void) | undefined;
  /** The error the call ends with once cancelled (cancelError of its reason). */
  cancelled: ApiError | undefined;
  wake: (() => void) | undefined;
  /** Ends the call's count in the pool's needs. */
  release: () => void = () => undefined;

  cancel(reason: CancelReason = 'client-left'): void {
    if (this.cancelled !== undefined) return;
    this.cancelled = cancelError(reason);
    this.onCancel?.();
    this.wake?.();
  }
}

export class LbAgent implements Invoker {
  private readonly log: Logger;
  private readonly calls = new Set<LbCall>();
  private closing = false;
  private readonly wantLog: boolean;
  private idle: (() => void) | undefined;
  /** A call with secrets found no runner they may be sent to: said once, at warn. */
  private saidPlaintext = false;
  /**
   * Calls every runner refused, per fn, oldest first: when a call of that
   * fn ends on a runner (its container is free there now), the oldest is
   * woken at once to try that runner first, rather than at its next pause.
   */
  private readonly waiting = new Map<string, Array<{ readonly since: number; readonly wake: (freed: Runner) => void }>>();

  constructor(private readonly o: LbAgentOptions) {
    this.log = o.log.child({ module: 'lb' });
    this.wantLog = (o.callListeners ?? []).some((l) => l.onCallLog !== undefined);
  }

  /** The pool's runners as the placers see them (address, up, calls in flight from this LB). */
  get view(): readonly RunnerView[] {
    return this.o.pool.everyRunner();
  }

  invoke(call: Call, body: CallBody): RunningCall {
    const handle = new LbCall();
    let settle!: (o: CallOutcome) => void;
    handle.outcome = new Promise<CallOutcome>((r) => (settle = r));
    if (this.closing) {
      handle.response = Promise.reject(serverBusy());
      handle.response.catch(() => undefined);
      settle(outcomeOf(call, 503, undefined, serverBusy()));
      return handle;
    }
    this.calls.add(handle);
    handle.release = this.o.pool.need(call.fn.runnerGroup, call.fn.memoryMB);
    handle.response = this.run(handle, call, body, settle);
    handle.response.catch(() => undefined);
    return handle;
  }

  private async run(handle: LbCall, call: Call, body: CallBody, settle: (o: CallOutcome) => void): Promise<CallResponse> {
    let placed: { attempt: Extract<Attempt, { kind: 'committed' }>; runner: Runner };
    try {
      placed = await this.place(handle, call, await wholeBody(body));
    } catch (err) {
      settle(outcomeOf(call, 503, undefined, err));
      this.done(handle);
      throw err;
    }
    const { attempt, runner: on } = placed;
    handle.log = attempt.log;
    let logTold = false;
    if (this.wantLog) {
      // Told even when the runner sent none: a listener may wait for it (onCallEnd's logFollows).
      const tellLog = (log: string): void => {
        logTold = true;
        this.tellCalls((l) => l.onCallLog?.(call, log));
      };
      attempt.log.then(tellLog, () => tellLog(''));
    }
    handle.onCancel = () => attempt.cancel();
    if (handle.cancelled !== undefined) attempt.cancel();
    let status = 0;
    let error: unknown;
    try {
      const response = await attempt.response;
      status = response.status;
      return response;
    } catch (err) {
      error = err;
      throw err;
    } finally {
      // The call is over once the runner says so (its answer streamed), however it ended.
      attempt.finished
        .then((f) => {
          on.release();
          this.wakeOne(call.fn.fnId, on);
          const outcome = outcomeOf(call, status, f, error);
          if (f && f.success && outcome.startedAt !== undefined) {
            this.o.placer.report(call.fn.fnId, on, {
              kind: 'ran',
              waitMs: outcome.timings.wait_ms,
              ...(f.initStartTime > 0 ? { startMs: (outcome.timings.image_ms ?? 0) + (outcome.timings.create_ms ?? 0) + (outcome.timings.start_ms ?? 0) } : {}),
            });
          }
          settle(outcome);
          this.tellCalls((l) => l.onCallEnd?.(call, outcome, this.wantLog && !logTold));
          this.done(handle);
        })
        .catch((err: unknown) => this.log.error({ err }, 'could not end a call placed on a runner'));
    }
  }

  /** Rounds of attempts until a runner commits to the call, the call's timeout passes, or it is cancelled. */
  private async place(handle: LbCall, call: Call, body: Buffer): Promise<{ attempt: Extract<Attempt, { kind: 'committed' }>; runner: Runner }> {
    const t0 = performance.now();
    const deadline = t0 + call.fn.timeoutS * 1000;
    const { call: sent, secrets } = await this.withSecrets(call);
    const request = engageRequest(sent, body, traceMetadata(call), secrets);
    let attempts = 0;
    let pause = this.o.retryDelayMs ?? 10;
    /** The runner where a call of this fn just ended, when that woke this one: tried first. */
    let first: Runner | undefined;
    let rounds = 0;
    for (;;) {
      rounds++;
      let runners = this.o.pool.runners(call.fn.runnerGroup);
      // Secrets go only where nobody between could read them.
      if (secrets !== undefined) {
        const all = runners;
        runners = runners.filter((r) => r.client.secure === true);
        if (runners.length === 0 && all.length > 0) throw this.plaintext(all);
      }
      let round = this.o.placer.order(call.fn.fnId, runners) as Runner[];
      // Every runner held down: try them all rather than fail without asking.
      if (round.length === 0 && runners.every((r) => !r.up)) round = [...runners];
      if (first !== undefined && round.includes(first)) round = [first, ...round.filter((r) => r !== first)];
      for (const runner of round) {
        if (handle.cancelled !== undefined) throw handle.cancelled;
        // It left the pool while this round's earlier attempts ran.
        if (runner.draining) continue;
        attempts++;
        runner.hold();
        // Refused everywhere once: the preferred runner is asked to make room (not every runner: that would start it everywhere).
        const makeRoom = rounds > 1 && runner === round[0] && first === undefined;
        const attempt = await runner.client.engage(request, { wantLog: this.wantLog, makeRoom });
        this.tell((l) => l.onAttempt?.(call.fn.fnId, runner.address, attempt.kind));
        if (attempt.kind === 'committed') {
          this.reached(runner);
          this.tell((l) => l.onPlaced?.(call.fn.fnId, runner.address, attempts, performance.now() - t0));
          return { attempt, runner };
        }
        runner.release();
        if (attempt.kind === 'failed') {
          // One line when it goes down, not one per call: a runner that is gone fails every attempt.
          if (runner.failed()) this.log.warn({ runner: runner.address, reason: attempt.reason }, 'runner unreachable: held down, its calls go to the others');
        } else this.reached(runner);
        this.o.placer.report(call.fn.fnId, runner, attempt.kind === 'refused' ? { kind: 'refused', roomMs: attempt.roomMs } : { kind: 'failed' });
      }
      // No runner can be reached at all: waiting for the call's timeout would only hold the caller.
      if (runners.length > 0 && runners.every((r) => !r.client.reachable)) {
        this.tell((l) => l.onUnplaced?.(call.fn.fnId));
        throw noRunnerReachable(runners);
      }
      if (performance.now() + pause > deadline) {
        this.tell((l) => l.onUnplaced?.(call.fn.fnId));
        throw serverBusy();
      }
      first = await this.pauseOrWake(handle, call.fn.fnId, t0, pause);
      pause = Math.min(MAX_ROUND_PAUSE_MS, pause * 2);
    }
  }

  /**
   * Waits `pauseMs` before the call's next round, or less: until a call of
   * the same fn ends on a runner (answers with that runner), or the call is
   * cancelled. Calls of a fn wait in line by arrival (`since`): the oldest
   * is woken first, and one woken for nothing (refused again) keeps its place.
   */
  private pauseOrWake(handle: LbCall, fnId: string, since: number, pauseMs: number): Promise<Runner | undefined> {
    return new Promise((resolve) => {
      let line = this.waiting.get(fnId);
      if (!line) this.waiting.set(fnId, (line = []));
      const queue = line;
      const woken = (freed: Runner | undefined): void => {
        clearTimeout(timer);
        handle.wake = undefined;
        const at = queue.indexOf(entry);
        if (at >= 0) queue.splice(at, 1);
        if (queue.length === 0 && this.waiting.get(fnId) === queue) this.waiting.delete(fnId);
        resolve(freed);
      };
      const entry = { since, wake: (freed: Runner): void => woken(freed) };
      const timer = setTimeout(() => woken(undefined), pauseMs);
      handle.wake = () => woken(undefined);
      let at = queue.length;
      while (at > 0 && queue[at - 1]!.since > since) at--;
      queue.splice(at, 0, entry);
    });
  }

  /** A call of `fnId` ended on `freed`: the oldest call of that fn waiting for room tries there now. */
  private wakeOne(fnId: string, freed: Runner): void {
    this.waiting.get(fnId)?.[0]?.wake(freed);
  }

  /**
   * The call as it goes to runners, and the values of its fn's secrets
   * (undefined: none to send). When they changed since the call was looked
   * up (a detached call that waited in the queue), it carries the version
   * of the values it brings: runners' containers are keyed by it.
   */
  private async withSecrets(call: Call): Promise<{ call: Call; secrets: Readonly<Record<string, string>> | undefined }> {
    const version = call.fn.secretsVersion;
    if (!version || !this.o.secrets) return { call, secrets: undefined };
    const now = await this.o.secrets.current(call.fn.fnId, version);
    if (now.version === version) return { call, secrets: now.values };
    const { secretsVersion: _old, ...fn } = call.fn;
    return { call: { ...call, fn: Object.freeze(now.version === '' ? fn : { ...fn, secretsVersion: now.version }) }, secrets: now.version === '' ? undefined : now.values };
  }

  /** 500 for a call with secrets when every runner is reached in plaintext on the network. */
  private plaintext(runners: readonly Runner[]): ApiError {
    const message =
      `this fn has secrets, and the LB sends them only over mutual TLS or to a runner on loopback; its runners (${runners.map((r) => r.address).join(', ')}) are reached in plaintext: ` +
      'set FNTS_GRPC_TLS_CERT, FNTS_GRPC_TLS_KEY and FNTS_GRPC_TLS_CA on the LB and its runners (fnts certs makes them)';
    if (!this.saidPlaintext) {
      this.saidPlaintext = true;
      this.log.warn({ runners: runners.map((r) => r.address) }, `calls of fns with secrets fail: ${message}`);
    }
    return new ApiError(E.SecretsUnavailable, { message });
  }

  private tellCalls(fn: (l: CallListener) => void): void {
    tellEach(this.o.callListeners, fn, this.log, 'a call listener');
  }

  private tell(fn: (l: PlacementListener) => void): void {
    tellEach(this.o.listeners, fn, this.log, 'a placement listener');
  }

  /** `runner` answered an attempt; if it was down, that is told once, with how many attempts failed meanwhile. */
  private reached(runner: Runner): void {
    const missed = runner.reached();
    if (missed > 0) this.log.info({ runner: runner.address, failedAttempts: missed }, 'runner reachable again: calls are placed on it');
  }

  private done(handle: LbCall): void {
    handle.release();
    this.calls.delete(handle);
    if (this.calls.size === 0) this.idle?.();
  }

  abort(): void {
    this.closing = true;
    for (const call of [...this.calls]) call.cancel('shutdown');
  }

  async close(): Promise<void> {
    this.closing = true;
    if (this.calls.size > 0) await new Promise<void>((resolve) => (this.idle = resolve));
    await this.o.pool.close();
  }
}

/** 503 for a call no runner can take because none can be reached (each connection attempt failed). */
function noRunnerReachable(runners: readonly Runner[]): ApiError {
  return new ApiError(E.ServiceUnavailable, {
    message: `no runner is reachable (${runners.map((r) => r.address).join(', ')}): calls cannot be placed until one answers`,
    headers: { 'Retry-After': '1' },
  });
}

/** The caller's W3C trace context, carried in the Engage stream's metadata too. */
function traceMetadata(call: Call): Record<string, string> {
  const md: Record<string, string> = {};
  const h = call.headers;
  for (let i = 0; i + 1 < h.length; i += 2) {
    const name = h[i]!;
    if (sameName(name, 'traceparent')) md['traceparent'] = h[i + 1]!;
    else if (sameName(name, 'tracestate')) md['tracestate'] = h[i + 1]!;
  }
  return md;
}
