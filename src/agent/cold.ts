/**
 * A cold container (the `default` format, seed 002's prepCold): one
 * container per call. The call's body goes to its stdin, its stdout is the
 * answer, stderr is the log; the request's details are in its environment:
 * FN_DEADLINE, FN_METHOD, FN_REQUEST_URL, FN_CALL_ID and every caller header
 * X-Y as FN_HEADER_X_Y. The container is removed after the call.
 */
import { Writable } from 'node:stream';
import type { Cookie, Driver, RunResult } from '../drivers/index.js';
import { E, FunctionError } from '../models/index.js';
import { containerBase, type FunctionSpec } from './call.js';
import { answerOnStdout, type LogSink } from './logs.js';
import type { CallRequest, CallResponse } from './protocol/call.js';
import { startTimings, type CallTrace } from './trace.js';

export interface ColdContainerOptions {
  readonly id: string;
  readonly spec: FunctionSpec;
  readonly driver: Driver;
  readonly labels: Readonly<Record<string, string>>;
  readonly logs: LogSink | undefined;
  /** FN_MAX_RESPONSE_SIZE; 0 = no limit. */
  readonly maxResponseBytes: number;
}

/** How a cold call can be cut short, besides the caller leaving. */
type Stop = 'timeout' | 'too-big';

/** Collects stdout, up to a limit: past it, `onOverflow` is told once and the rest dropped. */
class Collector extends Writable {
  readonly chunks: Buffer[] = [];
  size = 0;

  constructor(
    private readonly max: number,
    private readonly onOverflow: () => void,
  ) {
    super();
  }

  override _write(chunk: Buffer, _enc: BufferEncoding, done: () => void): void {
    if (this.size <= this.max) {
      this.size += chunk.length;
      if (this.size > this.max) this.onOverflow();
      else this.chunks.push(chunk);
    }
    done();
  }
}

/** The request, as the cold contract puts it in the environment. */
function callEnv(spec: FunctionSpec, req: CallRequest, deadline: Date): Record<string, string> {
  const env: Record<string, string> = {
    ...spec.env,
    FN_DEADLINE: deadline.toISOString(),
    FN_METHOD: req.method,
    FN_REQUEST_URL: req.url,
    FN_CALL_ID: req.id,
  };
  const h = req.headers;
  for (let i = 0; i + 1 < h.length; i += 2) {
    const key = `FN_HEADER_${h[i]!.toUpperCase().replace(/-/g, '_')}`;
    env[key] = env[key] === undefined ? h[i + 1]! : `${env[key]}, ${h[i + 1]!}`;
  }
  return env;
}

export class ColdContainer {
  private cookie: Cookie | undefined;

  constructor(private readonly o: ColdContainerOptions) {}

  /**
   * Runs the call to the end: the answer (200 with stdout) when the function
   * exits 0; otherwise throws 504 (deadline), 502 (crash, out of memory,
   * answer too large), the caller's cancel reason, or the driver's errors.
   * `signal` aborts the preparation (an image pull) when the server stops.
   */
  async run(
    req: CallRequest,
    deadline: Date,
    control: { reason: unknown; onCancel: ((reason: unknown) => void) | undefined },
    trace: CallTrace,
    statsIntervalMs: number,
    signal: AbortSignal,
  ): Promise<CallResponse> {
    const { spec } = this.o;
    let stop: Stop | undefined;
    const kill = (why: Stop): void => {
      stop ??= why;
      void this.cookie?.close();
    };
    const max = this.o.maxResponseBytes > 0 ? this.o.maxResponseBytes : Infinity;
    const stdout = new Collector(max, () => kill('too-big'));

    this.cookie = await this.o.driver.prepare(
      {
        ...containerBase(spec),
        id: this.o.id,
        env: callEnv(spec, req, deadline),
        labels: this.o.labels,
        mounts: [],
        stdin: true,
        logs: answerOnStdout(stdout, this.o.logs),
      },
      signal,
    );
    const cookie = this.cookie;
    // The caller left (or the server began to stop) while the container was prepared.
    if (control.reason !== undefined) throw control.reason;
    const timer = setTimeout(() => kill('timeout'), Math.max(0, deadline.getTime() - Date.now()));
    control.onCancel = () => void cookie.close();
    try {
      const created = performance.now();
      await cookie.run();
      trace.started(
        startTimings(cookie.timings, performance.now() - created),
        (onStat, ms) => cookie.watchStats(onStat, ms),
        statsIntervalMs,
      );
      const stdin = cookie.stdin!;
      stdin.on('error', () => undefined); // a function that exits without reading its input
      if (req.body === null) stdin.end();
      else if (Buffer.isBuffer(req.body)) stdin.end(req.body);
      else req.body.pipe(stdin);
      const result: RunResult = await cookie.wait();
      trace.executed();
      if (control.reason !== undefined) throw control.reason;
      if (stop === 'timeout') throw new FunctionError(E.CallTimeout);
      if (stop === 'too-big') throw new FunctionError(E.FunctionResponseTooBig);
      if (result.status !== 'success') {
        throw new FunctionError(E.FunctionFailed, { message: `${E.FunctionFailed.message}: ${result.message ?? result.status}` });
      }
      return { status: 200, headers: [], body: Buffer.concat(stdout.chunks, stdout.size) };
    } finally {
      clearTimeout(timer);
      control.onCancel = undefined;
    }
  }

  /** Removes the container (idempotent). */
  async remove(): Promise<void> {
    await this.cookie?.close();
  }
}
