/**
 * The Docker driver: containers through the Docker Engine API (dockerode),
 * hardened the way Fn runs functions: an unprivileged user where the image
 * allows, every capability dropped, no privilege escalation, a read-only root
 * filesystem with a sized tmpfs /tmp, pid and open-file limits, memory with
 * no extra swap, a CPU quota from milli-CPUs, no log driver (output is
 * attached and streamed to the caller's sinks).
 */
import { createRequire } from 'node:module';
import type { Duplex, Readable, Writable } from 'node:stream';
import Docker from 'dockerode';
import { InvalidImageRef, parseImageRef, type ImageRef } from '../../models/image.js';
import {
  ContainerStartError,
  DriverError,
  ImageError,
  type ContainerInfo,
  type ContainerSpec,
  type Cookie,
  type Driver,
  type PrepareTimings,
  type RunResult,
  type RunStatus,
  type Stat,
} from '../driver.js';
import { within } from '../../time/index.js';
import { engineMessage, statusCode } from './engine-errors.js';
import type { ContainerNetwork } from './network.js';

/**
 * docker-modem follows an HTTP redirect from the engine by itself, with a
 * request that has no error listener: when that request fails (the engine
 * redirects a path it finds unclean, such as one an odd image name makes,
 * to a URL that names no host), its error is thrown out of the process. The
 * engine's API never redirects, so a 3xx is taken as the failed answer it
 * is: the request that got it rejects, and nothing else is sent.
 * (driver-faults.test.ts answers each engine step with a redirect.)
 */
(createRequire(import.meta.url)('docker-modem/lib/http.js') as { maxRedirects: number }).maxRedirects = 0;

export interface DockerDriverOptions {
  /** Defaults to the engine named by DOCKER_HOST, else /var/run/docker.sock. */
  readonly docker?: Docker;
  /** How long an image pull may take (FN_HOT_PULL_TIMEOUT_MSECS). */
  readonly pullTimeoutMs: number;
  /** FN_MAX_PIDS */
  readonly maxPids: number;
  /** FN_MAX_OPEN_FILES */
  readonly maxOpenFiles: number;
  /** Off with FN_DISABLE_READONLY_ROOTFS. */
  readonly readOnlyRootfs: boolean;
  /** User 1000:1000, no capabilities, no-new-privileges; off with FN_DISABLE_UNPRIVILEGED_CONTAINERS. */
  readonly unprivileged: boolean;
  /**
   * Which network containers join (network.ts's FunctionNetwork: fnts's
   * fenced network, FN_DOCKER_NETWORKS's first, or Docker's bridge); closed
   * with the driver. Without it, Docker's default bridge.
   */
  readonly network?: ContainerNetwork;
}

interface ImageInfo {
  /** The user the image asks to run as ('' for root/unset). */
  readonly user: string;
}

/** Containers are named `fnts-<ContainerSpec id>`. */
const NAME_PREFIX = 'fnts-';

const ROOT_USERS = new Set(['', '0', 'root', '0:0', 'root:root']);

/** `image` parsed, or an ImageError saying why the engine cannot have it. */
function checkedRef(image: string): ImageRef {
  try {
    return parseImageRef(image);
  } catch (err) {
    if (err instanceof InvalidImageRef) throw new ImageError(image, `Invalid image reference ${JSON.stringify(image)}: ${err.reason}`, false, { cause: err });
    throw err;
  }
}

function abortError(signal: AbortSignal): unknown {
  return signal.reason ?? new Error('aborted');
}

export class DockerDriver implements Driver {
  private readonly docker: Docker;
  private readonly images = new Map<string, Promise<ImageInfo>>();
  private closed = false;

  constructor(private readonly options: DockerDriverOptions) {
    this.docker = options.docker ?? new Docker();
  }

  /** Inspects the image, pulling it first when absent. One lookup per image at a time. */
  private imageInfo(image: string, signal?: AbortSignal): Promise<ImageInfo> {
    let info = this.images.get(image);
    if (!info) {
      info = this.resolveImage(image, signal);
      this.images.set(image, info);
      // A failure is not cached: the next call tries again (the registry may be back).
      info.catch(() => this.images.delete(image));
    }
    return info;
  }

  private async resolveImage(image: string, signal?: AbortSignal): Promise<ImageInfo> {
    // Before anything asks the engine: a name off the grammar would reach its API as a path it redirects or refuses.
    const ref = checkedRef(image);
    try {
      return await this.inspectImage(image);
    } catch (err) {
      if (statusCode(err) !== 404) throw new DriverError(`Docker engine error inspecting image ${image}: ${engineMessage(err)}`, { cause: err });
    }
    await this.pull(image, ref, signal);
    try {
      return await this.inspectImage(image);
    } catch (err) {
      throw new ImageError(image, `Failed to pull image ${image}: the image is not present after the pull`, false, { cause: err });
    }
  }

  private async inspectImage(image: string): Promise<ImageInfo> {
    const info = (await this.docker.getImage(image).inspect()) as { Config?: { User?: string } };
    return { user: info.Config?.User ?? '' };
  }

  private async pull(image: string, ref: ImageRef, signal?: AbortSignal): Promise<void> {
    const fromImage = (ref.registry ? `${ref.registry}/` : '') + ref.repository;
    const timeout = AbortSignal.timeout(this.options.pullTimeoutMs);
    const abort = signal ? AbortSignal.any([signal, timeout]) : timeout;
    try {
      // The engine's answer: an HTTP response (a Readable) of progress lines.
      const stream = (await this.docker.createImage({
        fromImage,
        ...(ref.digest ? { tag: ref.digest } : { tag: ref.tag }),
        abortSignal: abort,
      })) as Readable;
      await new Promise<void>((resolve, reject) => {
        const onAbort = (): void => {
          stream.destroy();
          reject(abortError(abort));
        };
        if (abort.aborted) return onAbort();
        abort.addEventListener('abort', onAbort, { once: true });
        this.docker.modem.followProgress(stream, (err: Error | null, output: Array<{ error?: string }>) => {
          abort.removeEventListener('abort', onAbort);
          const failed = output?.find((o) => o.error);
          if (err || failed) reject(new Error(err?.message ?? failed?.error));
          else resolve();
        });
      });
    } catch (err) {
      if (timeout.aborted) throw new ImageError(image, `Image pull timed out: ${image}`, true, { cause: err });
      if (signal?.aborted) throw abortError(signal);
      throw new ImageError(image, `Failed to pull image ${image}: ${engineMessage(err)}`, false, { cause: err });
    }
  }

  async prepare(spec: ContainerSpec, signal?: AbortSignal): Promise<Cookie> {
    if (this.closed) throw new DriverError('driver is closed');
    const t0 = performance.now();
    const image = await this.imageInfo(spec.image, signal);
    const t1 = performance.now();
    if (signal?.aborted) throw abortError(signal);
    const o = this.options;
    let network: string | undefined;
    try {
      network = await o.network?.networkFor(signal);
    } catch (err) {
      if (signal?.aborted) throw abortError(signal);
      throw err instanceof DriverError ? err : new DriverError(`could not set up the functions' network: ${engineMessage(err)}`, { cause: err });
    }
    const user = o.unprivileged ? (ROOT_USERS.has(image.user) ? '1000:1000' : image.user) : undefined;
    const hostConfig: Docker.HostConfig = {
      Memory: spec.memoryBytes,
      MemorySwap: spec.memoryBytes,
      PidsLimit: o.maxPids,
      Ulimits: [
        { Name: 'nofile', Soft: o.maxOpenFiles, Hard: o.maxOpenFiles },
        { Name: 'memlock', Soft: 64 * 1024, Hard: 64 * 1024 },
        { Name: 'sigpending', Soft: 5000, Hard: 5000 },
        { Name: 'msgqueue', Soft: 819200, Hard: 819200 },
      ],
      ReadonlyRootfs: o.readOnlyRootfs,
      Tmpfs: { '/tmp': `rw,nosuid,nodev,size=${spec.tmpfsBytes},mode=1777` },
      Binds: spec.mounts.map((m) => `${m.hostPath}:${m.containerPath}${m.readOnly ? ':ro' : ''}`),
      LogConfig: { Type: 'none', Config: {} },
      ...(network ? { NetworkMode: network } : {}),
      ...(spec.cpuMillis > 0 ? { CpuPeriod: 100_000, CpuQuota: spec.cpuMillis * 100 } : {}),
      ...(o.unprivileged ? { CapDrop: ['ALL'], SecurityOpt: ['no-new-privileges'] } : {}),
    };
    const create = (): Promise<Docker.Container> =>
      this.docker.createContainer({
        name: `${NAME_PREFIX}${spec.id}`,
        Image: spec.image,
        Env: Object.entries(spec.env).map(([k, v]) => `${k}=${v}`),
        Labels: { ...spec.labels },
        ...(user ? { User: user } : {}),
        AttachStdout: !!spec.logs,
        AttachStderr: !!spec.logs,
        AttachStdin: !!spec.stdin,
        OpenStdin: !!spec.stdin,
        StdinOnce: !!spec.stdin,
        Tty: false,
        HostConfig: hostConfig,
      });
    let container: Docker.Container;
    try {
      try {
        container = await create();
      } catch (err) {
        // An engine outside swarm mode refuses a network that is gone (another server removed it): made again, once.
        if (statusCode(err) === 404 && network && (await o.network?.reinstate(network))) container = await create();
        else throw err;
      }
    } catch (err) {
      if (statusCode(err) === 404) {
        // The image went away since it was inspected: forget it so the next prepare pulls.
        this.images.delete(spec.image);
        throw new ImageError(spec.image, `Image not found: ${spec.image}`, false, { cause: err });
      }
      throw new DriverError(`Docker engine error creating a container for ${spec.image}: ${engineMessage(err)}`, { cause: err });
    }
    const cookie = new DockerCookie(
      this.docker,
      container,
      spec,
      { imageMs: t1 - t0, createMs: performance.now() - t1 },
      (id) => this.leftBehind(id),
      network ? { name: network, owner: o.network! } : undefined,
    );
    try {
      if (spec.logs || spec.stdin) await cookie.attach();
    } catch (err) {
      await cookie.close();
      throw new DriverError(`Docker engine error attaching to container: ${engineMessage(err)}`, { cause: err });
    }
    if (signal?.aborted) {
      await cookie.close();
      throw abortError(signal);
    }
    return cookie;
  }

  async listContainers(labels: Readonly<Record<string, string>>): Promise<ContainerInfo[]> {
    const filters = { label: Object.entries(labels).map(([k, v]) => `${k}=${v}`) };
    let found: Docker.ContainerInfo[];
    try {
      found = await this.docker.listContainers({ all: true, filters });
    } catch (err) {
      throw new DriverError(`Docker engine error listing containers: ${engineMessage(err)}`, { cause: err });
    }
    return found.map((c) => {
      const name = (c.Names[0] ?? '').replace(/^\//, '');
      return { id: c.Id, specId: name.startsWith(NAME_PREFIX) ? name.slice(NAME_PREFIX.length) : '', labels: c.Labels ?? {} };
    });
  }

  async removeContainers(labels: Readonly<Record<string, string>>, which: (c: ContainerInfo) => boolean = () => true): Promise<number> {
    const doomed = (await this.listContainers(labels)).filter(which);
    const failed: unknown[] = [];
    await Promise.all(
      doomed.map((c) =>
        this.docker
          .getContainer(c.id)
          .remove({ force: true, v: true })
          .catch(async (err: unknown) => {
            // 409: a removal is already under way (a cookie's close); it is done only when the container is gone.
            if (statusCode(err) === 409) await untilGone(this.docker.getContainer(c.id));
            else if (statusCode(err) !== 404) failed.push(err);
          }),
      ),
    );
    if (failed.length > 0) throw new DriverError(`Docker engine error removing ${failed.length} of ${doomed.length} containers: ${engineMessage(failed[0])}`, { cause: failed[0] });
    return doomed.length;
  }

  async ping(signal?: AbortSignal): Promise<void> {
    if (this.closed) throw new DriverError('driver is closed');
    if (signal?.aborted) throw abortError(signal);
    try {
      // dockerode's typings omit ping's options; the modem passes abortSignal on to the request.
      await (this.docker.ping as (opts: { abortSignal?: AbortSignal }) => Promise<unknown>).call(this.docker, signal ? { abortSignal: signal } : {});
    } catch (err) {
      if (signal?.aborted) throw abortError(signal);
      throw new DriverError(`the Docker engine does not answer: ${engineMessage(err)}`, { cause: err });
    }
  }

  /**
   * Stops taking work. Containers whose removal the engine failed are tried
   * once more (what is still left goes at the owner's next start).
   */
  async close(): Promise<void> {
    this.closed = true;
    clearInterval(this.retryTimer);
    this.retryTimer = undefined;
    await this.removeLeftBehind();
    // After the containers: the last server out removes the network, which the engine refuses while one is attached.
    await this.options.network?.close();
  }

  /** Containers a cookie's close() could not remove: tried again every REMOVAL_RETRY_MS until they are gone. */
  private readonly unremoved = new Set<string>();
  private retryTimer: NodeJS.Timeout | undefined;

  private leftBehind(id: string): void {
    this.unremoved.add(id);
    if (this.closed || this.retryTimer) return;
    this.retryTimer = setInterval(() => {
      void this.removeLeftBehind().then(() => {
        if (this.unremoved.size === 0) {
          clearInterval(this.retryTimer);
          this.retryTimer = undefined;
        }
      });
    }, REMOVAL_RETRY_MS);
    this.retryTimer.unref();
  }

  /** One more try at each container left behind; never rejects. */
  private async removeLeftBehind(): Promise<void> {
    await Promise.all(
      [...this.unremoved].map((id) =>
        this.docker
          .getContainer(id)
          .remove({ force: true, v: true })
          .then(
            () => this.unremoved.delete(id),
            (err: unknown) => {
              if (statusCode(err) === 404) this.unremoved.delete(id);
            },
          ),
      ),
    );
  }
}

class DockerCookie implements Cookie {
  readonly id: string;
  stdin: Writable | null = null;
  private result: Promise<RunResult> | undefined;
  private settle!: (r: RunResult) => void;
  private readonly settled: Promise<RunResult>;
  private killedAs: RunStatus | undefined;
  private closing: Promise<void> | undefined;
  /** Ends the engine's wait for the container's exit, once it is removed and the wait still has not answered (see close). */
  private readonly exitWatch = new AbortController();

  /** Resolves when the attached output stream has ended (all output delivered). */
  private outputDone: Promise<void> = Promise.resolve();

  constructor(
    private readonly docker: Docker,
    private readonly container: Docker.Container,
    private readonly spec: ContainerSpec,
    readonly timings: PrepareTimings,
    /** Told of a container the engine would not remove, so the driver tries again later. */
    private readonly leftBehind: (id: string) => void,
    /** The network the container joins, and who makes it again if it is gone at start. */
    private readonly network?: { readonly name: string; readonly owner: ContainerNetwork },
  ) {
    this.id = container.id;
    this.settled = new Promise<RunResult>((resolve) => (this.settle = resolve));
  }

  /** Streams stdout/stderr (and stdin when asked) before start, as `docker run` does. */
  async attach(): Promise<void> {
    const stream = (await this.container.attach({
      stream: true,
      stdout: true,
      stderr: true,
      stdin: !!this.spec.stdin,
      // A hijacked (raw) connection: output frames arrive without HTTP chunking to parse.
      hijack: true,
      // The hijacked connection itself: a socket, both ways.
    })) as Duplex;
    const logs = this.spec.logs;
    if (logs) this.docker.modem.demuxStream(stream, logs.stdout, logs.stderr);
    else stream.resume();
    this.outputDone = new Promise<void>((resolve) => {
      stream.once('end', resolve);
      stream.once('close', resolve);
    });
    // An attach stream may error when the container is removed under it; that is the end, not a failure.
    stream.on('error', () => {});
    if (this.spec.stdin) this.stdin = stream;
  }

  async run(signal?: AbortSignal): Promise<void> {
    if (signal?.aborted) throw abortError(signal);
    // Armed before start so that even an instant exit is seen.
    this.result = this.watchExit();
    try {
      try {
        await this.container.start();
      } catch (err) {
        // In swarm mode the engine creates a container whose network is gone and refuses only its start: made again, once.
        if (this.network && (await this.network.owner.reinstate(this.network.name))) await this.container.start();
        else throw err;
      }
    } catch (err) {
      // An answer from the engine means it refused this container (its
      // entrypoint, its environment); no answer means the engine is gone.
      if (statusCode(err) !== undefined) throw new ContainerStartError(engineMessage(err), { cause: err });
      throw new DriverError(`Docker engine error starting container: ${engineMessage(err)}`, { cause: err });
    }
    // The signal governs the start only (see Cookie.run): one that aborted
    // meanwhile (no event comes twice) kills the container; a later abort
    // must not cut a running container, so no listener outlives this call.
    if (signal?.aborted) {
      this.killedAs ??= (signal.reason as { name?: string } | undefined)?.name === 'TimeoutError' ? 'timeout' : 'cancelled';
      await this.close();
      throw abortError(signal);
    }
  }

  private async watchExit(): Promise<RunResult> {
    let exitCode: number | undefined;
    try {
      const r = (await this.container.wait({ condition: 'next-exit', abortSignal: this.exitWatch.signal })) as { StatusCode?: number };
      exitCode = r.StatusCode;
    } catch {
      // Removed while waiting (or no answer once removed: see close): killed.
    }
    // The output may still be on its way when the exit is reported; a second is plenty.
    await within(this.outputDone, 1000, () => undefined, { unref: true });
    let oomKilled = false;
    try {
      const info = await this.container.inspect();
      oomKilled = !!info.State?.OOMKilled;
      exitCode ??= info.State?.ExitCode;
    } catch {
      // Already removed.
    }
    const status: RunStatus = this.killedAs ?? (oomKilled ? 'killed' : exitCode === 0 ? 'success' : 'error');
    const message = oomKilled
      ? `container out of memory (limit ${Math.round(this.spec.memoryBytes / (1024 * 1024))} MB)`
      : this.killedAs
        ? `container ${this.killedAs === 'timeout' ? 'timed out' : this.killedAs}`
        : exitCode === 0
          ? undefined
          : `container exited with code ${exitCode ?? 'unknown'}`;
    const result: RunResult = { status, exitCode, oomKilled, message };
    this.settle(result);
    return result;
  }

  wait(): Promise<RunResult> {
    return this.settled;
  }

  watchStats(onStat: (stat: Stat) => void, intervalMs: number): () => void {
    // The engine publishes a container's stats once a second to whoever
    // listens: one stream per watch costs a single request, where polling
    // would cost one per reading and wait for the same publication anyway.
    let stream: Readable | undefined;
    let stopped = false;
    let last = 0;
    let pending = '';
    void this.container
      .stats({ stream: true })
      .then((s) => {
        // A streamed answer: the HTTP response, a Readable (typed as a plain ReadableStream).
        stream = s as Readable;
        if (stopped) return stream.destroy();
        stream.on('error', () => undefined);
        stream.on('data', (chunk: Buffer) => {
          pending += chunk.toString('utf8');
          let nl: number;
          while ((nl = pending.indexOf('\n')) >= 0) {
            const line = pending.slice(0, nl);
            pending = pending.slice(nl + 1);
            const now = Date.now();
            // Readings closer than the interval are skipped (the first always counts).
            if (stopped || line.trim() === '' || (last > 0 && now - last < intervalMs * 0.9)) continue;
            try {
              const metrics = statMetrics(JSON.parse(line) as DockerStats);
              last = now;
              onStat({ timestamp: now, metrics });
            } catch {
              // a torn or odd line: skip it
            }
          }
        });
      })
      .catch(() => undefined);
    return () => {
      stopped = true;
      stream?.destroy();
    };
  }

  async freeze(): Promise<void> {
    try {
      await this.container.pause();
    } catch (err) {
      throw new DriverError(`Docker engine error pausing container: ${engineMessage(err)}`, { cause: err });
    }
  }

  async unfreeze(): Promise<void> {
    try {
      await this.container.unpause();
    } catch (err) {
      throw new DriverError(`Docker engine error unpausing container: ${engineMessage(err)}`, { cause: err });
    }
  }

  close(): Promise<void> {
    this.closing ??= (async () => {
      this.killedAs ??= 'killed';
      let failure: unknown;
      try {
        await this.container.remove({ force: true, v: true });
      } catch (err) {
        if (statusCode(err) === 409) await untilGone(this.container);
        else if (statusCode(err) !== 404) {
          // The engine refused; retry once, since a leaked container is worse than a slow close.
          await this.container.remove({ force: true, v: true }).catch((again: unknown) => {
            if (statusCode(again) !== 404) failure = again;
          });
        }
      }
      if (failure !== undefined) {
        // Still there: the driver tries again later, and wait() ends now (the
        // container is no longer this cookie's: nothing will watch its exit).
        this.leftBehind(this.id);
        this.settle({ status: this.killedAs, exitCode: undefined, oomKilled: false, message: `container could not be removed (${engineMessage(failure)}); it is removed later` });
      }
      if (!this.result) this.settle({ status: this.killedAs, exitCode: undefined, oomKilled: false, message: 'container removed before it ran' });
      // The engine answers a wait when the container goes, but not always for
      // one removed in the moment the wait was being set up (a container that
      // never started: 2 waits in 200 here never answered); the wait is given
      // up after a while, so that wait() settles and no request stays open.
      else void within(this.settled, EXIT_AFTER_REMOVAL_MS, () => this.exitWatch.abort(), { unref: true });
    })();
    return this.closing;
  }
}

/** How long the engine's wait for a container's exit may stay unanswered once the container is removed. */
const EXIT_AFTER_REMOVAL_MS = 2_000;

/** How often containers the engine would not remove are tried again. */
const REMOVAL_RETRY_MS = 5_000;

/** How long a removal someone else started may take before we stop waiting for it. */
const REMOVAL_WAIT_MS = 10_000;
/** Failed looks in a row after which the engine is taken to be unable to tell. */
const REMOVAL_LOOKS = 3;

/**
 * Resolves once the engine no longer knows `container` (a removal already
 * in progress has finished), or after REMOVAL_WAIT_MS, or once the engine
 * failed to answer REMOVAL_LOOKS times in a row: a server must not report
 * a container removed while it still exists, nor hang on one (what is left
 * goes at the owner's next start).
 */
async function untilGone(container: Docker.Container): Promise<void> {
  const end = Date.now() + REMOVAL_WAIT_MS;
  let failed = 0;
  while (Date.now() < end && failed < REMOVAL_LOOKS) {
    try {
      await container.inspect();
      failed = 0;
    } catch (err) {
      if (statusCode(err) === 404) return;
      failed++;
    }
    await new Promise((r) => setTimeout(r, 50));
  }
}

interface DockerStats {
  networks?: Record<string, { rx_bytes?: number; tx_bytes?: number }>;
  memory_stats?: { usage?: number; limit?: number };
  blkio_stats?: { io_service_bytes_recursive?: Array<{ op?: string; value?: number }> | null };
  cpu_stats?: { cpu_usage?: { total_usage?: number; usage_in_usermode?: number; usage_in_kernelmode?: number } };
}

/** Docker's stats JSON as Fn's metrics. */
function statMetrics(s: DockerStats): Record<string, number> {
  let rx = 0;
  let tx = 0;
  for (const n of Object.values(s.networks ?? {})) {
    rx += n.rx_bytes ?? 0;
    tx += n.tx_bytes ?? 0;
  }
  let read = 0;
  let write = 0;
  for (const io of s.blkio_stats?.io_service_bytes_recursive ?? []) {
    if (io.op?.toLowerCase() === 'read') read += io.value ?? 0;
    if (io.op?.toLowerCase() === 'write') write += io.value ?? 0;
  }
  const cpu = s.cpu_stats?.cpu_usage ?? {};
  return {
    net_rx: rx,
    net_tx: tx,
    mem_limit: s.memory_stats?.limit ?? 0,
    mem_usage: s.memory_stats?.usage ?? 0,
    disk_read: read,
    disk_write: write,
    cpu_user: cpu.usage_in_usermode ?? 0,
    cpu_total: cpu.total_usage ?? 0,
    cpu_kernel: cpu.usage_in_kernelmode ?? 0,
  };
}
