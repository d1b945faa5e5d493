/**
 * Where a container's stdout and stderr go: line by line into the server's
 * log at debug level, tagged with the fn and container, each line capped so a
 * function cannot flood the log with one endless line.
 */
import { Writable } from 'node:stream';
import type { Logger } from 'pino';

export interface LogSink {
  readonly stdout: Writable;
  readonly stderr: Writable;
}

const MAX_LINE = 8 * 1024;

class LineLogger extends Writable {
  private partial = '';

  constructor(private readonly onLine: (line: string) => void) {
    super();
  }

  override _write(chunk: Buffer, _enc: BufferEncoding, done: () => void): void {
    const text = this.partial + chunk.toString('utf8');
    const lines = text.split('\n');
    this.partial = lines.pop() ?? '';
    if (this.partial.length > MAX_LINE) {
      lines.push(this.partial);
      this.partial = '';
    }
    for (const line of lines) if (line !== '') this.onLine(line.length > MAX_LINE ? `${line.slice(0, MAX_LINE)}...` : line);
    done();
  }

  override _final(done: () => void): void {
    if (this.partial) this.onLine(this.partial);
    done();
  }
}

/** A sink that drops what it is given. */
function discard(): Writable {
  return new Writable({ write: (_chunk, _enc, done) => done() });
}

/**
 * Sinks for a container whose stdout is its answer (the stdio formats, cold
 * calls): `stdout` takes it, stderr goes to the log, or nowhere.
 */
export function answerOnStdout(stdout: Writable, logs: LogSink | undefined): LogSink {
  return { stdout, stderr: logs?.stderr ?? discard() };
}

/**
 * Sinks for a container's output, or undefined when nothing would be logged
 * (the engine then discards it: no stream to carry on the hot path).
 */
export function containerLogs(logger: Logger, fields: Record<string, string>): LogSink | undefined {
  if (!logger.isLevelEnabled('debug')) return undefined;
  const log = logger.child(fields);
  return {
    stdout: new LineLogger((line) => log.debug({ stream: 'stdout' }, line)),
    stderr: new LineLogger((line) => log.debug({ stream: 'stderr' }, line)),
  };
}
