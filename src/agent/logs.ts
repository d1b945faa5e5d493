/**
 * Where a container's stdout and stderr go: to the call the container is
 * serving (its CallLog, capped at FN_MAX_LOG_SIZE_BYTES, for the call's
 * record) and, line by line, into the server's log at info level as
 * structured lines carrying the app, fn, container and call ids and the
 * stream, so that a log collector can find a function's output without
 * the calls API. Each line is capped so a function cannot flood the log
 * with one endless line, and each container's lines are rate-limited
 * (log-limit.ts) so it cannot flood it with many.
 */
import { Writable } from 'node:stream';
import { StringDecoder } from 'node:string_decoder';
import type { Logger } from 'pino';
import type { Clock } from './clock.js';
import { LineLimiter, LINES_PER_SECOND } from './log-limit.js';
import type { FunctionSpec } from './spec.js';

export interface LogSink {
  readonly stdout: Writable;
  readonly stderr: Writable;
}

const MAX_LINE = 8 * 1024;

/**
 * How long after a call ends its container's output still belongs to it,
 * unless the container starts another call or ends first: output travels
 * through the engine (stdout and stderr each on its own pipe) and may
 * arrive after the answer; on a loaded 2-core machine a line came more than
 * 100 ms late. Nothing waits on it but the call's record and an LB's log.
 */
export const LOG_GRACE_MS = 300;

/**
 * What a container wrote during one call, up to `max` bytes; the rest is
 * counted, not kept. `closed` resolves with the text once the container has
 * moved on (see ContainerOutput).
 */
export class CallLog {
  private readonly chunks: Buffer[] = [];
  private size = 0;
  private dropped = 0;
  private done = false;
  private settle!: (text: string) => void;
  readonly closed = new Promise<string>((resolve) => (this.settle = resolve));

  constructor(private readonly max: number) {}

  /** No more output belongs to this call. Idempotent. */
  close(): void {
    if (this.done) return;
    this.done = true;
    this.settle(this.text());
  }

  write(chunk: Buffer): void {
    if (this.done) return;
    const room = this.max - this.size;
    if (room >= chunk.length) {
      this.chunks.push(chunk);
      this.size += chunk.length;
      return;
    }
    if (room > 0) {
      this.chunks.push(chunk.subarray(0, room));
      this.size += room;
    }
    this.dropped += chunk.length - Math.max(0, room);
  }

  /** The log as text; a cut log says how much was left out. */
  text(): string {
    const kept = Buffer.concat(this.chunks, this.size).toString('utf8');
    return this.dropped > 0 ? `${kept}\n[log cut at ${this.max} bytes: ${this.dropped} more bytes not kept]\n` : kept;
  }
}

/** Splits output into capped lines. */
class LineLogger {
  private partial = '';
  /** A character cut between two chunks is held until its last byte comes. */
  private readonly decoder = new StringDecoder('utf8');

  constructor(private readonly onLine: (line: string) => void) {}

  push(chunk: Buffer): void {
    const text = this.partial + this.decoder.write(chunk);
    const lines = text.split('\n');
    this.partial = lines.pop() ?? '';
    if (this.partial.length > MAX_LINE) {
      lines.push(this.partial);
      this.partial = '';
    }
    for (const line of lines) if (line !== '') this.onLine(line.length > MAX_LINE ? `${line.slice(0, MAX_LINE)}...` : line);
  }

  flush(): void {
    // Bytes of a character the output ended inside are logged (as U+FFFD), as they were before the decoder held them.
    const last = this.partial + this.decoder.end();
    if (last) this.onLine(last);
    this.partial = '';
  }
}

type StreamName = 'stdout' | 'stderr';

/** One output stream of a container: each chunk to the current call's log, lines to the server's log. */
class OutputStream extends Writable {
  readonly lines: LineLogger | undefined;

  constructor(
    private readonly owner: ContainerOutput,
    toServerLog: ((stream: StreamName, line: string) => void) | undefined,
    stream: StreamName,
  ) {
    super();
    this.lines = toServerLog ? new LineLogger((line) => toServerLog(stream, line)) : undefined;
  }

  override _write(chunk: Buffer, _enc: BufferEncoding, done: () => void): void {
    this.owner.current?.write(chunk);
    this.lines?.push(chunk);
    done();
  }

  override _final(done: () => void): void {
    this.lines?.flush();
    done();
  }
}

/** Outputs whose call has ended, waiting for their grace to pass. */
const ending = new Set<ContainerOutput>();
let sweeper: NodeJS.Timeout | undefined;

function sweep(): void {
  const due = performance.now() - LOG_GRACE_MS;
  for (const output of ending) if (output.endedAt <= due) output.close();
  if (ending.size === 0 && sweeper) {
    clearInterval(sweeper);
    sweeper = undefined;
  }
}

/**
 * A container's output, attributed to the call it serves: from begin()
 * until the container begins another call, ends (finish()), or
 * LOG_GRACE_MS after end(), whichever comes first. Output after that
 * belongs to no call (it still reaches the server's log).
 */
export class ContainerOutput implements LogSink {
  current: CallLog | undefined;
  callId: string | undefined;
  readonly stdout: Writable;
  readonly stderr: Writable;
  /** performance.now() when the call ended (its log closes LOG_GRACE_MS later), while in `ending`. */
  endedAt = 0;
  private readonly limiter: LineLimiter | undefined;
  private readonly streams: readonly OutputStream[];

  /** `clock` paces the container's lines into the server's log. */
  constructor(logger: Logger, clock: Clock, spec: FunctionSpec, container: string) {
    let toServerLog: ((stream: StreamName, line: string) => void) | undefined;
    if (logger.isLevelEnabled('info')) {
      const log = logger.child({ app: spec.appId, fn: spec.fnId, container });
      const limiter = new LineLimiter(clock, (dropped) =>
        log.warn({ dropped }, `dropped ${dropped} lines of this container's output from the server log: it wrote more than ${LINES_PER_SECOND} lines a second (the calls' own logs keep them)`),
      );
      toServerLog = (stream, line) => {
        if (limiter.admit()) log.info({ call: this.callId, stream }, line);
      };
      this.limiter = limiter;
    }
    const stdout = new OutputStream(this, toServerLog, 'stdout');
    const stderr = new OutputStream(this, toServerLog, 'stderr');
    this.stdout = stdout;
    this.stderr = stderr;
    this.streams = [stdout, stderr];
  }

  /** The call `id` owns what comes next (its log when someone keeps it). */
  begin(id: string, log: CallLog | undefined): void {
    this.close();
    this.callId = id;
    this.current = log;
  }

  /**
   * The call is over: its log closes after LOG_GRACE_MS, or sooner when the
   * container moves on; until then its output still carries its id (kept
   * log or not).
   */
  end(): void {
    if (this.callId === undefined || ending.has(this)) return;
    this.endedAt = performance.now();
    ending.add(this);
    // One sweep for every container, rather than a timer per call.
    if (!sweeper) {
      sweeper = setInterval(sweep, LOG_GRACE_MS / 2);
      sweeper.unref();
    }
  }

  /** The call's log closes now (its grace is over, or the container begins another call). */
  close(): void {
    ending.delete(this);
    this.current?.close();
    this.current = undefined;
    this.callId = undefined;
  }

  /**
   * The container has ended and the engine has delivered all its output:
   * an unfinished last line still reaches the server's log, lines dropped
   * from it are reported, and the call's log closes. Idempotent.
   */
  finish(): void {
    for (const s of this.streams) s.lines?.flush();
    this.limiter?.close();
    this.close();
  }

  /**
   * Sinks for a container whose stdout is its answer (the stdio formats,
   * cold calls): `answer` takes stdout, stderr is the log.
   */
  answeringOn(answer: Writable): LogSink {
    return { stdout: answer, stderr: this.stderr };
  }
}
