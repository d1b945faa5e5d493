/**
 * A cold call (the `default` format, Fn's prepCold in api/agent/agent.go):
 * one container per call, holding its memory for its whole life. The call's
 * body goes to its stdin, its stdout is the answer, stderr is the log; the
 * request's details are in its environment: FN_DEADLINE, FN_METHOD,
 * FN_REQUEST_URL, FN_CALL_ID and every caller header X-Y as FN_HEADER_X_Y.
 * The container is removed after the call.
 */
import { Writable } from 'node:stream';
import type { Cookie, RunResult } from '../drivers/index.js';
import { E, FunctionError, newId } from '../models/index.js';
import { Deadline } from '../time/index.js';
import type { CallCancel } from './cancel.js';
import { ContainerOutput } from './logs.js';
import { launchError, secretsFolder, serverBusy, untilSlotDeadline, type PoolHost } from './pool.js';
import { secretsMount } from './secrets.js';
import { responseLimit, type CallRequest, type CallResponse } from './protocol/call.js';
import type { ResourceToken } from './resource.js';
import { containerBase, type FunctionSpec } from './spec.js';
import { startTimings, statusOf, type CallTrace } from './trace.js';

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
    FN_METHOD: req.call.method,
    FN_REQUEST_URL: req.call.url,
    FN_CALL_ID: req.call.id,
  };
  const h = req.call.headers;
  for (let i = 0; i + 1 < h.length; i += 2) {
    const key = `FN_HEADER_${h[i]!.toUpperCase().replace(/-/g, '_')}`;
    env[key] = env[key] === undefined ? h[i + 1]! : `${env[key]}, ${h[i + 1]!}`;
  }
  return env;
}

/**
 * Memory and CPU for a cold call: at once in fail-fast mode (else 503), or
 * waited for until the slot deadline (half the fn's timeout; then 503).
 */
async function reserve(host: PoolHost, spec: FunctionSpec, signal: AbortSignal): Promise<ResourceToken> {
  if (host.config.nonBlockingResources) {
    const token = host.tryReserve(spec.request);
    if (!token) throw serverBusy();
    return token;
  }
  return untilSlotDeadline(spec, signal, (deadline) => {
    const either = AbortSignal.any([signal, deadline]);
    return host.resources.reserve(spec.request, either).catch((err: unknown) => {
      throw either.aborted ? err : launchError(err);
    });
  });
}

/**
 * Runs a cold call to the end: the answer (200 with stdout) when the
 * function exits 0; otherwise throws 504 (deadline), 502 (crash, out of
 * memory, answer too large), the cancel's reason, or the driver's errors in
 * Fn's words. A cancel (`signal`) stops the preparation (an image pull) or
 * the container. The container is removed on every path.
 */
export async function runColdCall(host: PoolHost, spec: FunctionSpec, req: CallRequest, cancel: CallCancel, trace: CallTrace): Promise<CallResponse> {
  // A cold call is slow anyway: it takes the cancel as an AbortSignal.
  const signal = cancel.signal;
  const deadline = new Date(Date.now() + spec.timeoutMs);
  const id = newId().toLowerCase();
  const states = host.containerStates(id, spec);
  states.to('wait');
  let token: ResourceToken;
  let tokenMs = 0;
  try {
    const asked = performance.now();
    token = await reserve(host, spec, signal);
    tokenMs = performance.now() - asked;
  } catch (err) {
    states.end();
    trace.end(statusOf(err), err);
    throw err;
  }
  states.to('start');
  const output = new ContainerOutput(host.logger, host.clock, spec, id);
  output.begin(req.call.id, trace.log());
  let cookie: Cookie | undefined;
  let stop: Stop | undefined;
  const kill = (why: Stop): void => {
    stop ??= why;
    void cookie?.close();
  };
  const stdout = new Collector(responseLimit(host.config.maxResponseBytes), () => kill('too-big'));
  const onCancel = (): void => void cookie?.close();
  let timeout: Deadline | undefined;
  host.adoptCold(id, () => cookie?.close());
  const secretsDir = secretsFolder(host.socketFolder, id);
  let secretsMade = false;
  try {
    // A cold container lives for one call: its secrets are read for it, and go with it.
    const secrets = await secretsMount(host.secrets, spec, secretsDir, host.log);
    secretsMade = secrets !== undefined;
    cookie = await host.driver.prepare(
      {
        ...containerBase(spec),
        id,
        env: callEnv(spec, req, deadline),
        labels: host.labels(spec),
        mounts: secrets ? [secrets] : [],
        stdin: true,
        logs: output.answeringOn(stdout),
      },
      signal,
    );
    // The caller left (or the server began to stop) while the container was prepared.
    if (signal.aborted) throw signal.reason;
    signal.addEventListener('abort', onCancel, { once: true });
    timeout = Deadline.at(deadline, () => kill('timeout'));
    const created = performance.now();
    await cookie.run();
    states.to('busy');
    const running = cookie;
    trace.started(startTimings(cookie.timings, performance.now() - created, tokenMs), (onStat, ms) => running.watchStats(onStat, ms), host.config.statsIntervalMs);
    const stdin = cookie.stdin!;
    stdin.on('error', () => undefined); // a function that exits without reading its input
    if (req.body === null) stdin.end();
    else if (Buffer.isBuffer(req.body)) stdin.end(req.body);
    else req.body.pipe(stdin);
    const result: RunResult = await cookie.wait();
    trace.executed();
    if (signal.aborted) throw signal.reason;
    if (stop === 'timeout') throw new FunctionError(E.CallTimeout);
    if (stop === 'too-big') throw new FunctionError(E.FunctionResponseTooBig);
    if (result.status !== 'success') {
      throw new FunctionError(E.FunctionFailed, { message: `${E.FunctionFailed.message}: ${result.message ?? result.status}` });
    }
    const response = { status: 200, headers: [], body: Buffer.concat(stdout.chunks, stdout.size) };
    trace.end(response.status);
    return response;
  } catch (err) {
    const answer = signal.aborted && err === signal.reason ? err : launchError(err);
    trace.end(statusOf(answer), answer);
    throw answer;
  } finally {
    // A cold container serves one call and goes: not a retirement.
    states.end();
    timeout?.clear();
    signal.removeEventListener('abort', onCancel);
    await cookie?.close();
    if (secretsMade) await host.secrets?.folders.close(secretsDir);
    // The container is gone: all its output has been delivered.
    output.finish();
    host.forgetCold(id);
    token.close();
  }
}
