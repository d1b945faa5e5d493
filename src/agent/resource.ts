/**
 * The resource tracker (as Fn's api/agent/resource.go): how much memory and
 * CPU the containers of this server may hold, and who holds what.
 *
 *   usable = min(host MemAvailable, cgroup limit) - head room, clamped by
 *            FN_MAX_TOTAL_MEMORY_BYTES (likewise CPU, in milli-CPUs)
 *
 *   +------------------- usable -------------------+
 *   | sync-only reserve (20%) | async area (80%)   |
 *   |                         |      ^ high-water  |
 *   +-------------------------+------|-------------+
 *                                    80% of the async area
 *
 * Sync calls may use both parts (their own first); async calls only the
 * async area; async dequeueing pauses while the async area is above its
 * high-water mark. Every granted reservation is a Token whose close()
 * returns exactly what it took, exactly once.
 */
import { readFileSync } from 'node:fs';
import { cpus } from 'node:os';
import { tellEach } from '../models/index.js';

export const MB = 1024 * 1024;

export interface Capacity {
  /** Bytes of memory containers may reserve in total. */
  readonly memoryBytes: number;
  /** Milli-CPUs containers may reserve in total. */
  readonly cpuMillis: number;
}

export interface ResourceRequest {
  readonly memoryMB: number;
  /** 0 means "no CPU quota": it costs nothing. */
  readonly cpuMillis: number;
  /** Async calls may not touch the sync-only reserve. */
  readonly isAsync?: boolean;
}

/** A granted reservation. close() releases it exactly once, however often it is called. */
export interface ResourceToken {
  readonly memoryBytes: number;
  readonly cpuMillis: number;
  close(): void;
}

export class ResourceUnavailableError extends Error {
  override readonly name = 'ResourceUnavailableError';
}

export interface ResourceTracker {
  /** Whether this request could ever be granted on this server (else waiting is pointless). */
  isPossible(req: ResourceRequest): boolean;
  /** Grants the request now or returns null; never waits. */
  tryReserve(req: ResourceRequest): ResourceToken | null;
  /**
   * Waits until the request can be granted; counts as a waiter meanwhile.
   * Rejects with the signal's reason when it aborts, and with
   * ResourceUnavailableError when the request is impossible.
   */
  reserve(req: ResourceRequest, signal?: AbortSignal): Promise<ResourceToken>;
  /** Number of blocked reserve() calls. */
  readonly waiterCount: number;
  /** Resolves once async usage is under the high-water mark. */
  waitAsyncCapacity(signal?: AbortSignal): Promise<void>;
  /**
   * Calls `listener` whenever a reserve() starts waiting, so idle holders
   * can be asked to leave; returns the function that stops it. The listener
   * runs synchronously inside reserve(): it must be cheap (schedule work,
   * don't do it) and must not throw (one that does is skipped).
   */
  onWaiter(listener: () => void): () => void;
  /**
   * What must be freed for the longest-waiting reserve() (or `req`) to be
   * granted (bytes and milli-CPUs, each 0 when enough is free), or
   * undefined when nothing waits and no `req` is given.
   */
  shortfall(req?: ResourceRequest): { readonly memoryBytes: number; readonly cpuMillis: number } | undefined;
  snapshot(): ResourceSnapshot;
}

export interface ResourceSnapshot {
  readonly memory: { syncTotal: number; syncUsed: number; asyncTotal: number; asyncUsed: number; asyncHighWater: number };
  readonly cpu: { syncTotal: number; syncUsed: number; asyncTotal: number; asyncUsed: number; asyncHighWater: number };
  readonly waiters: number;
}

/** One resource (memory or CPU) split into the sync-only reserve and the async area. */
class Pool {
  readonly syncTotal: number;
  readonly asyncTotal: number;
  readonly asyncHighWater: number;
  syncUsed = 0;
  asyncUsed = 0;

  constructor(total: number) {
    this.syncTotal = Math.floor((total * 2) / 10);
    this.asyncTotal = total - this.syncTotal;
    this.asyncHighWater = Math.floor((this.asyncTotal * 8) / 10);
  }

  possible(amount: number, isAsync: boolean): boolean {
    return amount <= (isAsync ? this.asyncTotal : this.asyncTotal + this.syncTotal);
  }

  available(amount: number, isAsync: boolean): boolean {
    return amount <= this.free(isAsync);
  }

  free(isAsync: boolean): number {
    const asyncFree = this.asyncTotal - this.asyncUsed;
    return isAsync ? asyncFree : asyncFree + this.syncTotal - this.syncUsed;
  }

  /** Takes `amount` (sync calls from their reserve first); returns how to give it back. */
  take(amount: number, isAsync: boolean): { sync: number; async: number } {
    const sync = isAsync ? 0 : Math.min(this.syncTotal - this.syncUsed, amount);
    const async = amount - sync;
    this.syncUsed += sync;
    this.asyncUsed += async;
    return { sync, async };
  }

  give(part: { sync: number; async: number }): void {
    this.syncUsed -= part.sync;
    this.asyncUsed -= part.async;
  }

  view(): ResourceSnapshot['memory'] {
    const { syncTotal, syncUsed, asyncTotal, asyncUsed, asyncHighWater } = this;
    return { syncTotal, syncUsed, asyncTotal, asyncUsed, asyncHighWater };
  }
}

interface Waiter {
  readonly req: ResourceRequest;
  readonly resolve: (t: ResourceToken) => void;
  readonly reject: (e: unknown) => void;
  readonly cleanup: () => void;
}

export class MemoryCpuTracker implements ResourceTracker {
  private readonly mem: Pool;
  private readonly cpu: Pool;
  private readonly waiters: Waiter[] = [];
  private readonly asyncWaiters = new Set<() => void>();
  private readonly waiterListeners = new Set<() => void>();

  constructor(capacity: Capacity) {
    this.mem = new Pool(capacity.memoryBytes);
    this.cpu = new Pool(capacity.cpuMillis);
  }

  get waiterCount(): number {
    return this.waiters.length;
  }

  isPossible(req: ResourceRequest): boolean {
    return this.mem.possible(req.memoryMB * MB, !!req.isAsync) && this.cpu.possible(req.cpuMillis, !!req.isAsync);
  }

  private available(req: ResourceRequest): boolean {
    return this.mem.available(req.memoryMB * MB, !!req.isAsync) && this.cpu.available(req.cpuMillis, !!req.isAsync);
  }

  private grant(req: ResourceRequest): ResourceToken {
    const memPart = this.mem.take(req.memoryMB * MB, !!req.isAsync);
    const cpuPart = this.cpu.take(req.cpuMillis, !!req.isAsync);
    let open = true;
    return {
      memoryBytes: req.memoryMB * MB,
      cpuMillis: req.cpuMillis,
      close: () => {
        if (!open) return;
        open = false;
        this.mem.give(memPart);
        this.cpu.give(cpuPart);
        this.released();
      },
    };
  }

  /** After a release: grant waiters that now fit, in arrival order (a small one may pass a big one). */
  private released(): void {
    for (let i = 0; i < this.waiters.length;) {
      const w = this.waiters[i]!;
      if (this.available(w.req)) {
        this.waiters.splice(i, 1);
        w.cleanup();
        w.resolve(this.grant(w.req));
      } else {
        i++;
      }
    }
    if (this.belowHighWater()) {
      for (const wake of [...this.asyncWaiters]) wake();
    }
  }

  tryReserve(req: ResourceRequest): ResourceToken | null {
    if (!this.isPossible(req) || !this.available(req)) return null;
    return this.grant(req);
  }

  reserve(req: ResourceRequest, signal?: AbortSignal): Promise<ResourceToken> {
    if (!this.isPossible(req)) {
      return Promise.reject(new ResourceUnavailableError(`${req.memoryMB} MB / ${req.cpuMillis} mCPU can never be reserved on this server`));
    }
    if (signal?.aborted) return Promise.reject(signal.reason);
    // As in Fn's tracker, whoever fits is served at once; a waiter is not a queue head.
    if (this.available(req)) return Promise.resolve(this.grant(req));
    return new Promise<ResourceToken>((resolve, reject) => {
      const onAbort = (): void => {
        const i = this.waiters.indexOf(waiter);
        if (i >= 0) this.waiters.splice(i, 1);
        reject(signal!.reason);
      };
      const waiter: Waiter = { req, resolve, reject, cleanup: () => signal?.removeEventListener('abort', onAbort) };
      signal?.addEventListener('abort', onAbort, { once: true });
      this.waiters.push(waiter);
      // A listener's failure must not fail the reservation (see onWaiter); the tracker has no log.
      tellEach(this.waiterListeners, (l) => l(), undefined, 'a waiter listener');
    });
  }

  private belowHighWater(): boolean {
    return this.mem.asyncUsed < this.mem.asyncHighWater && this.cpu.asyncUsed < this.cpu.asyncHighWater;
  }

  waitAsyncCapacity(signal?: AbortSignal): Promise<void> {
    if (signal?.aborted) return Promise.reject(signal.reason);
    if (this.belowHighWater()) return Promise.resolve();
    return new Promise<void>((resolve, reject) => {
      const wake = (): void => {
        this.asyncWaiters.delete(wake);
        signal?.removeEventListener('abort', onAbort);
        resolve();
      };
      const onAbort = (): void => {
        this.asyncWaiters.delete(wake);
        reject(signal!.reason);
      };
      signal?.addEventListener('abort', onAbort, { once: true });
      this.asyncWaiters.add(wake);
    });
  }

  onWaiter(listener: () => void): () => void {
    this.waiterListeners.add(listener);
    return () => this.waiterListeners.delete(listener);
  }

  shortfall(req: ResourceRequest | undefined = this.waiters[0]?.req): { memoryBytes: number; cpuMillis: number } | undefined {
    if (!req) return undefined;
    const isAsync = !!req.isAsync;
    return {
      memoryBytes: Math.max(0, req.memoryMB * MB - this.mem.free(isAsync)),
      cpuMillis: Math.max(0, req.cpuMillis - this.cpu.free(isAsync)),
    };
  }

  snapshot(): ResourceSnapshot {
    return { memory: this.mem.view(), cpu: this.cpu.view(), waiters: this.waiters.length };
  }
}

// ---- sizing the server from the host (Linux /proc and cgroup v1/v2)

export interface HostReadings {
  /** MemAvailable from /proc/meminfo, bytes. */
  readonly memAvailable: number | undefined;
  /** The cgroup's memory limit, bytes (undefined when unlimited or unreadable). */
  readonly cgroupMemoryLimit: number | undefined;
  /** Processors in /proc/cpuinfo (or the runtime's count). */
  readonly cpuCount: number;
  /** The cgroup's CPU quota in milli-CPUs (undefined when unlimited). */
  readonly cgroupCpuMillis: number | undefined;
}

function readText(path: string): string | undefined {
  try {
    return readFileSync(path, 'utf8').trim();
  } catch {
    return undefined;
  }
}

/** Reads what the host and its cgroup (v1 or v2) allow this process. */
export function readHost(): HostReadings {
  const meminfo = readText('/proc/meminfo') ?? '';
  const m = /^MemAvailable:\s+(\d+)\s+kB$/m.exec(meminfo);
  const memAvailable = m ? Number(m[1]) * 1024 : undefined;

  // cgroup v2 first (memory.max / cpu.max), then v1.
  let cgroupMemoryLimit: number | undefined;
  const v2mem = readText('/sys/fs/cgroup/memory.max');
  const v1mem = readText('/sys/fs/cgroup/memory/memory.limit_in_bytes');
  const memRaw = v2mem ?? v1mem;
  // v1 reports "unlimited" as a huge number near 2^63.
  if (memRaw && /^\d+$/.test(memRaw) && Number(memRaw) < 2 ** 60) cgroupMemoryLimit = Number(memRaw);

  let cgroupCpuMillis: number | undefined;
  const v2cpu = readText('/sys/fs/cgroup/cpu.max');
  if (v2cpu) {
    const [quota, period] = v2cpu.split(/\s+/);
    if (quota && quota !== 'max' && Number(period) > 0) cgroupCpuMillis = Math.floor((Number(quota) * 1000) / Number(period));
  } else {
    const quota = Number(readText('/sys/fs/cgroup/cpu/cpu.cfs_quota_us'));
    const period = Number(readText('/sys/fs/cgroup/cpu/cpu.cfs_period_us'));
    if (quota > 0 && period > 0) cgroupCpuMillis = Math.floor((quota * 1000) / period);
  }

  const cpuinfo = readText('/proc/cpuinfo') ?? '';
  const processors = (cpuinfo.match(/^processor\s*:/gm) ?? []).length;
  return { memAvailable, cgroupMemoryLimit, cpuCount: processors || cpus().length, cgroupCpuMillis };
}

/** Head room left for Docker, fnts itself and the rest of the host: 10%, clamped to 256 MB..5 GB. */
export function memoryHeadRoom(usable: number): number {
  return Math.min(Math.max(Math.floor(usable / 10), 256 * MB), 5 * 1024 * MB);
}

/**
 * The capacity containers may reserve, from host readings and the configured
 * maxima (0 = no maximum). Throws when the host leaves nothing to run on.
 */
export function computeCapacity(host: HostReadings, maxMemoryBytes: number, maxCpuMillis: number): Capacity {
  let memory = host.memAvailable ?? 2048 * MB;
  if (host.cgroupMemoryLimit !== undefined) memory = Math.min(memory, host.cgroupMemoryLimit);
  const headRoom = memoryHeadRoom(memory);
  if (headRoom >= memory) throw new Error(`not enough memory to run functions: ${Math.floor(memory / MB)} MB available`);
  memory -= headRoom;
  if (maxMemoryBytes > 0) memory = Math.min(memory, maxMemoryBytes);

  let cpu = host.cpuCount * 1000;
  if (host.cgroupCpuMillis !== undefined) cpu = Math.min(cpu, host.cgroupCpuMillis);
  if (maxCpuMillis > 0) cpu = Math.min(cpu, maxCpuMillis);
  return { memoryBytes: memory, cpuMillis: cpu };
}
