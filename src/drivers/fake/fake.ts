/**
 * A fake container driver for unit tests of the scheduling logic: no Docker,
 * but the Driver contract (driver.contract.ts) and the FDK contract for real.
 * A "container" runs one of two kinds of program in this process:
 * - `handle`: an http-stream function, an HTTP server that binds a socket in
 *   the container's /tmp/iofs mount and links lsnr.sock to it, as the FDKs
 *   do; calls reach it over that socket.
 * - `main`: a process with stdin, stdout and stderr (cold and the stdio
 *   formats), whose result is its exit code.
 *
 *   created --run()--> starting --run() resolves--> running --program ends--> exited
 *      |                  |                             |
 *      | close()          | run's signal, close()       | close(), OOM
 *      '------------------+-----------------------------+--> killed
 *
 * The program begins `startMs` after run() resolves.
 */
import { mkdirSync, symlinkSync, unlinkSync } from 'node:fs';
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import { join } from 'node:path';
import { PassThrough, Writable, type Readable } from 'node:stream';
import { DriverError, ImageError, type ContainerInfo, type ContainerSpec, type Cookie, type Driver, type RunResult, type RunStatus, type Stat } from '../driver.js';

/** What a `main` program sees, as a process would. */
export interface FakeProcess {
  /** The container's stdin; with no `spec.stdin` it is empty and ended. */
  readonly stdin: Readable;
  /** Into `spec.logs.stdout` (discarded without sinks). */
  readonly stdout: Writable;
  readonly stderr: Writable;
  readonly env: Readonly<Record<string, string>>;
  /** Aborts once the container has ended: exited, or killed (closed, out of memory). */
  readonly signal: AbortSignal;
  /**
   * Takes `bytes` more memory. Past the spec's `memoryBytes` the kernel
   * kills the container as out of memory: this throws, ending the program.
   */
  allocate(bytes: number): void;
}

/** A fake function: exactly one of `handle` (http-stream) or `main` (a process). */
export interface FakeFunction {
  /**
   * An http-stream function: answers one call, as the function would. Its
   * container needs the /tmp/iofs mount (without it, it exits with code 2
   * as an FDK does).
   */
  handle?(req: IncomingMessage, body: Buffer, res: ServerResponse): void | Promise<void>;
  /**
   * A process: runs once the container has started; the container exits
   * when it returns, with its result as the exit code (none: 0). A throw is
   * exit code 1 with the error on stderr.
   */
  main?(proc: FakeProcess): number | void | Promise<number | void>;
  /** How long after run() the program begins: main is called, the socket is bound (default 20 ms). */
  startMs?: number;
  /** `handle` only: never bind the socket. */
  neverReady?: boolean;
}

export interface FakeContainerState {
  readonly spec: ContainerSpec;
  frozen: boolean;
  removed: boolean;
  /** Calls answered through `handle`. */
  calls: number;
}

const MiB = 1024 * 1024;

/** Images this driver knows: image name -> behaviour. Unknown images fail like a failed pull. */
export class FakeDriver implements Driver {
  readonly containers: FakeContainerState[] = [];
  /** While set, ping() fails with it, as an engine that does not answer. */
  engineDown: string | undefined;
  private readonly cookies = new Map<FakeContainerState, FakeCookie>();
  private closed = false;

  constructor(private readonly functions: Record<string, FakeFunction>) {}

  /** Containers not removed yet. */
  live(): FakeContainerState[] {
    return this.containers.filter((c) => !c.removed);
  }

  async prepare(spec: ContainerSpec, signal?: AbortSignal): Promise<Cookie> {
    if (this.closed) throw new DriverError('driver is closed');
    const fn = this.functions[spec.image];
    if (!fn) throw new ImageError(spec.image, `Failed to pull image ${spec.image}: not found`);
    if (!fn.handle === !fn.main) throw new TypeError(`fake function ${spec.image} needs exactly one of handle and main`);
    if (signal?.aborted) throw signal.reason;
    const state: FakeContainerState = { spec, frozen: false, removed: false, calls: 0 };
    this.containers.push(state);
    const cookie = new FakeCookie(spec, fn, state);
    this.cookies.set(state, cookie);
    return cookie;
  }

  async listContainers(labels: Readonly<Record<string, string>>): Promise<ContainerInfo[]> {
    return this.live()
      .filter((c) => Object.entries(labels).every(([k, v]) => c.spec.labels[k] === v))
      .map((c) => ({ id: `fake-${c.spec.id}`, specId: c.spec.id, labels: c.spec.labels }));
  }

  async removeContainers(labels: Readonly<Record<string, string>>, which: (c: ContainerInfo) => boolean = () => true): Promise<number> {
    const doomed = new Set((await this.listContainers(labels)).filter(which).map((c) => c.specId));
    await Promise.all(this.live().flatMap((c) => (doomed.has(c.spec.id) ? [this.cookies.get(c)!.close()] : [])));
    return doomed.size;
  }

  async ping(signal?: AbortSignal): Promise<void> {
    if (this.closed) throw new DriverError('driver is closed');
    if (signal?.aborted) throw signal.reason;
    if (this.engineDown !== undefined) throw new DriverError(`the engine does not answer: ${this.engineDown}`);
  }

  async close(): Promise<void> {
    this.closed = true;
  }
}

/** Thrown inside a program by `allocate` past the limit: the kernel's kill, not the program's error. */
class OutOfMemory extends Error {}

function killStatus(reason: unknown): RunStatus {
  return (reason as { name?: string } | undefined)?.name === 'TimeoutError' ? 'timeout' : 'cancelled';
}

/**
 * A process's stdout or stderr: forwards to the sink with its backpressure,
 * and swallows what a dead process still writes (the engine would drop it).
 */
function processOutput(sink: Writable | undefined, alive: () => boolean): Writable {
  return new Writable({
    write(chunk: Buffer, _encoding, done) {
      if (!sink || !alive() || sink.write(chunk)) return done();
      sink.once('drain', () => done());
    },
  }).on('error', () => undefined);
}

class FakeCookie implements Cookie {
  readonly id: string;
  readonly stdin: PassThrough | null;
  readonly timings = { imageMs: 0, createMs: 0 };
  private server: Server | undefined;
  private startTimer: NodeJS.Timeout | undefined;
  private started = false;
  private outcome: RunResult | undefined;
  private settle!: (r: RunResult) => void;
  private readonly result: Promise<RunResult>;
  private readonly killed = new AbortController();
  private closing: Promise<void> | undefined;

  constructor(
    private readonly spec: ContainerSpec,
    private readonly fn: FakeFunction,
    private readonly state: FakeContainerState,
  ) {
    this.id = `fake-${spec.id}`;
    this.stdin = spec.stdin ? new PassThrough() : null;
    this.result = new Promise((r) => (this.settle = r));
  }

  private get iofs(): string | undefined {
    return this.spec.mounts.find((m) => m.containerPath === '/tmp/iofs')?.hostPath;
  }

  async run(signal?: AbortSignal): Promise<void> {
    if (this.state.removed) throw new DriverError('container removed');
    if (signal?.aborted) throw signal.reason;
    if (this.started) throw new DriverError('container already started');
    this.started = true;
    // An engine takes a moment to start a container: an abort meanwhile cuts
    // the start. The signal governs nothing after that (Cookie.run).
    await new Promise((r) => setImmediate(r));
    if (signal?.aborted) {
      await this.kill(killStatus(signal.reason));
      throw signal.reason;
    }
    if (this.outcome) throw new DriverError('container removed while it started');
    this.startTimer = setTimeout(() => {
      this.startTimer = undefined;
      if (this.fn.main) this.runMain();
      else this.serve();
    }, this.fn.startMs ?? 20);
  }

  private serve(): void {
    const dir = this.iofs;
    if (!dir) {
      this.spec.logs?.stderr.write('no /tmp/iofs mount to bind lsnr.sock in\n');
      return this.exited(2);
    }
    if (this.fn.neverReady) return;
    this.server = createServer((req, res) => {
      const chunks: Buffer[] = [];
      req.on('data', (c: Buffer) => chunks.push(c));
      req.on('end', () => {
        this.state.calls++;
        void this.fn.handle!(req, Buffer.concat(chunks), res);
      });
    });
    mkdirSync(dir, { recursive: true });
    this.server.listen(join(dir, 'lsnr.sock.tmp'), () => symlinkSync('lsnr.sock.tmp', join(dir, 'lsnr.sock')));
  }

  private runMain(): void {
    const alive = (): boolean => !this.outcome;
    const stdout = processOutput(this.spec.logs?.stdout, alive);
    const stderr = processOutput(this.spec.logs?.stderr, alive);
    let used = 0;
    const proc: FakeProcess = {
      stdin: this.stdin ?? new PassThrough().end(),
      stdout,
      stderr,
      env: this.spec.env,
      signal: this.killed.signal,
      allocate: (bytes) => {
        used += bytes;
        if (used <= this.spec.memoryBytes) return;
        void this.kill('killed', true);
        throw new OutOfMemory();
      },
    };
    // Never rejects: a throw is the program's exit code 1.
    void Promise.resolve()
      .then(() => this.fn.main!(proc))
      .then(
        (code) => code ?? 0,
        (err: unknown) => {
          if (err instanceof OutOfMemory) return undefined;
          stderr.write(`${err instanceof Error ? (err.stack ?? err.message) : String(err)}\n`);
          return 1;
        },
      )
      .then(async (code) => {
        if (code === undefined || this.outcome) return;
        // All of the output reaches the sinks before wait() says it exited.
        await Promise.all([stdout, stderr].map((s) => new Promise((r) => s.end(r))));
        this.exited(code);
      });
  }

  private exited(code: number): void {
    this.finish({ status: code === 0 ? 'success' : 'error', exitCode: code, oomKilled: false, message: code === 0 ? undefined : `container exited with code ${code}` });
  }

  /** Kills the program, whatever it is doing; the first ending is the one reported. */
  private async kill(status: RunStatus, oomKilled = false): Promise<void> {
    const running = this.started && !this.outcome;
    clearTimeout(this.startTimer);
    const server = this.server;
    this.server = undefined;
    if (server) {
      server.closeAllConnections();
      await new Promise<void>((r) => server.close(() => r()));
      try {
        unlinkSync(join(this.iofs!, 'lsnr.sock'));
      } catch {
        // already gone
      }
    }
    const message = oomKilled
      ? `container out of memory (limit ${Math.round(this.spec.memoryBytes / MiB)} MB)`
      : running
        ? `container ${status === 'timeout' ? 'timed out' : status}`
        : 'container removed before it ran';
    this.finish({ status, exitCode: running ? 137 : undefined, oomKilled, message });
  }

  private finish(result: RunResult): void {
    if (this.outcome) return;
    this.outcome = result;
    this.killed.abort();
    // A dead process reads no more: what is still written goes nowhere.
    this.stdin?.unpipe();
    this.stdin?.resume();
    this.settle(result);
  }

  wait(): Promise<RunResult> {
    return this.result;
  }

  watchStats(onStat: (stat: Stat) => void, intervalMs: number): () => void {
    const timer = setInterval(() => {
      if (this.state.removed) return;
      onStat({ timestamp: Date.now(), metrics: { mem_usage: 1024 * 1024 * (this.state.calls + 1), mem_limit: this.spec.memoryBytes, cpu_total: this.state.calls } });
    }, intervalMs);
    return () => clearInterval(timer);
  }

  async freeze(): Promise<void> {
    this.state.frozen = true;
  }

  async unfreeze(): Promise<void> {
    this.state.frozen = false;
  }

  close(): Promise<void> {
    this.closing ??= (async () => {
      this.state.removed = true;
      await this.kill('killed');
    })();
    return this.closing;
  }
}
