/**
 * A fake container driver for unit tests of the scheduling logic: no Docker,
 * but the FDK contract for real. A "container" is an HTTP server in this
 * process that binds a socket in the container's iofs folder and links
 * lsnr.sock to it, as the FDKs do; calls reach it over that socket.
 */
import { mkdirSync, symlinkSync, unlinkSync } from 'node:fs';
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import { join } from 'node:path';
import type { Writable } from 'node:stream';
import { DriverError, ImageError, type ContainerInfo, type ContainerSpec, type Cookie, type Driver, type RunResult, type Stat } from '../driver.js';

export interface FakeFunction {
  /** Answers one call, as the function would. */
  handle(req: IncomingMessage, body: Buffer, res: ServerResponse): void | Promise<void>;
  /** How long the container takes to become ready (default 20 ms). */
  startMs?: number;
  /** Never bind the socket. */
  neverReady?: boolean;
}

export interface FakeContainerState {
  readonly spec: ContainerSpec;
  frozen: boolean;
  removed: boolean;
  calls: number;
}

/** Images this driver knows: image name -> behaviour. Unknown images fail like a failed pull. */
export class FakeDriver implements Driver {
  readonly containers: FakeContainerState[] = [];
  private closed = false;

  constructor(private readonly functions: Record<string, FakeFunction>) {}

  /** Containers not removed yet. */
  live(): FakeContainerState[] {
    return this.containers.filter((c) => !c.removed);
  }

  async prepare(spec: ContainerSpec): Promise<Cookie> {
    if (this.closed) throw new DriverError('driver is closed');
    const fn = this.functions[spec.image];
    if (!fn) throw new ImageError(spec.image, `Failed to pull image ${spec.image}: not found`);
    const state: FakeContainerState = { spec, frozen: false, removed: false, calls: 0 };
    this.containers.push(state);
    return new FakeCookie(spec, fn, state);
  }

  async listContainers(labels: Readonly<Record<string, string>>): Promise<ContainerInfo[]> {
    return this.live()
      .filter((c) => Object.entries(labels).every(([k, v]) => c.spec.labels[k] === v))
      .map((c) => ({ id: `fake-${c.spec.id}`, specId: c.spec.id, labels: c.spec.labels }));
  }

  async removeContainers(labels: Readonly<Record<string, string>>, which: (c: ContainerInfo) => boolean = () => true): Promise<number> {
    const doomed = new Set((await this.listContainers(labels)).filter(which).map((c) => c.specId));
    for (const c of this.live()) if (doomed.has(c.spec.id)) c.removed = true;
    return doomed.size;
  }

  async close(): Promise<void> {
    this.closed = true;
  }
}

class FakeCookie implements Cookie {
  readonly id: string;
  readonly stdin: Writable | null = null;
  readonly timings = { imageMs: 0, createMs: 0 };
  private server: Server | undefined;
  private exited!: (r: RunResult) => void;
  private readonly result: Promise<RunResult>;

  constructor(
    private readonly spec: ContainerSpec,
    private readonly fn: FakeFunction,
    private readonly state: FakeContainerState,
  ) {
    this.id = `fake-${spec.id}`;
    this.result = new Promise((r) => (this.exited = r));
  }

  async run(): Promise<void> {
    const dir = this.spec.mounts.find((m) => m.containerPath === '/tmp/iofs')?.hostPath;
    if (!dir) throw new DriverError('no iofs mount');
    if (this.fn.neverReady) return;
    setTimeout(() => {
      if (this.state.removed) return;
      this.server = createServer((req, res) => {
        const chunks: Buffer[] = [];
        req.on('data', (c: Buffer) => chunks.push(c));
        req.on('end', () => {
          this.state.calls++;
          void this.fn.handle(req, Buffer.concat(chunks), res);
        });
      });
      mkdirSync(dir, { recursive: true });
      this.server.listen(join(dir, 'lsnr.sock.tmp'), () => symlinkSync('lsnr.sock.tmp', join(dir, 'lsnr.sock')));
    }, this.fn.startMs ?? 20);
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

  async close(): Promise<void> {
    if (this.state.removed && !this.server) return;
    this.state.removed = true;
    const server = this.server;
    this.server = undefined;
    if (server) {
      server.closeAllConnections();
      await new Promise<void>((r) => server.close(() => r()));
      try {
        unlinkSync(join(this.spec.mounts[0]!.hostPath, 'lsnr.sock'));
      } catch {
        // already gone
      }
    }
    this.exited({ status: 'killed', exitCode: 137, oomKilled: false, message: 'container killed' });
  }
}
