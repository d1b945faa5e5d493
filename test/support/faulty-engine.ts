/**
 * A Docker engine that fails on demand: an HTTP proxy on a unix socket in
 * front of the real engine (/var/run/docker.sock), which forwards every
 * request unchanged (attach's upgraded connections included) except those
 * of a step told to fail, which get the fault instead:
 *
 *   error     500 {"message": ...}, as the engine answers what it cannot do
 *   reset     the connection closed before any answer (a dying engine, a proxy cut)
 *   redirect  301 to /images/json, as the engine answers a path it finds unclean
 *   cut       the real answer begins, then the connection is closed (a stream that breaks)
 *   silent    no answer ever, the connection kept open (a wait the engine forgot: it does,
 *             for a container removed in the moment its wait is set up)
 *
 * Point a client at it (`new Docker({ socketPath })`, or DOCKER_HOST=unix://...)
 * to see how it copes with an engine failing at any step.
 */
import { randomBytes } from 'node:crypto';
import { rmSync } from 'node:fs';
import { createServer, request, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import { connect, type Socket } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

export const ENGINE_STEPS = ['ping', 'inspect-image', 'pull', 'create', 'attach', 'start', 'wait', 'stats', 'inspect', 'pause', 'unpause', 'remove', 'list'] as const;
export type EngineStep = (typeof ENGINE_STEPS)[number];
export type EngineFault = 'error' | 'reset' | 'redirect' | 'cut' | 'silent';

const UPSTREAM = '/var/run/docker.sock';

const ROUTES: ReadonlyArray<readonly [string, RegExp, EngineStep]> = [
  ['GET', /^\/_ping$/, 'ping'],
  ['HEAD', /^\/_ping$/, 'ping'],
  ['GET', /^\/images\/.+\/json$/, 'inspect-image'],
  ['POST', /^\/images\/create$/, 'pull'],
  ['POST', /^\/containers\/create$/, 'create'],
  ['GET', /^\/containers\/json$/, 'list'],
  ['POST', /^\/containers\/[^/]+\/attach$/, 'attach'],
  ['POST', /^\/containers\/[^/]+\/start$/, 'start'],
  ['POST', /^\/containers\/[^/]+\/wait$/, 'wait'],
  ['GET', /^\/containers\/[^/]+\/stats$/, 'stats'],
  ['GET', /^\/containers\/[^/]+\/json$/, 'inspect'],
  ['POST', /^\/containers\/[^/]+\/pause$/, 'pause'],
  ['POST', /^\/containers\/[^/]+\/unpause$/, 'unpause'],
  ['DELETE', /^\/containers\/[^/]+$/, 'remove'],
];

/** The step a request is, from its method and path (an API version prefix and the query aside). */
function stepOf(method: string | undefined, url: string | undefined): EngineStep | undefined {
  const path = (url ?? '').replace(/\?.*$/, '').replace(/^\/v[0-9.]+(?=\/)/, '');
  for (const [m, re, step] of ROUTES) if (m === method && re.test(path)) return step;
  return undefined;
}

export class FaultyEngine {
  /** How many requests of each step arrived (faulted or not). */
  readonly hits = new Map<EngineStep, number>();
  private readonly faults = new Map<EngineStep, { fault: EngineFault; left: number }>();
  private readonly sockets = new Set<Socket>();

  private constructor(
    private readonly server: Server,
    readonly socketPath: string,
  ) {}

  static async start(): Promise<FaultyEngine> {
    const socketPath = join(tmpdir(), `fnts-faulty-engine-${randomBytes(4).toString('hex')}.sock`);
    const server = createServer();
    const engine = new FaultyEngine(server, socketPath);
    server.on('connection', (s: Socket) => {
      engine.sockets.add(s);
      s.once('close', () => engine.sockets.delete(s));
    });
    server.on('request', (req: IncomingMessage, res: ServerResponse) => engine.handle(req, res));
    server.on('upgrade', (req: IncomingMessage, socket: Socket, head: Buffer) => engine.upgrade(req, socket, head));
    server.on('clientError', (_err, socket: Socket) => socket.destroy());
    await new Promise<void>((resolve, reject) => {
      server.once('error', reject);
      server.listen(socketPath, resolve);
    });
    return engine;
  }

  /** From now on, requests of `step` fail with `fault` (the next `times` of them; every one by default). */
  inject(step: EngineStep, fault: EngineFault, times = Infinity): void {
    this.faults.set(step, { fault, left: times });
  }

  /** Every step works again. */
  clear(): void {
    this.faults.clear();
  }

  async close(): Promise<void> {
    for (const s of this.sockets) s.destroy();
    await new Promise<void>((resolve) => this.server.close(() => resolve()));
    rmSync(this.socketPath, { force: true });
  }

  /** The fault for a request of `step`, counted; undefined to forward it. */
  private take(step: EngineStep | undefined): EngineFault | undefined {
    if (step === undefined) return undefined;
    this.hits.set(step, (this.hits.get(step) ?? 0) + 1);
    const f = this.faults.get(step);
    if (!f || f.left <= 0) return undefined;
    f.left--;
    return f.fault;
  }

  private handle(req: IncomingMessage, res: ServerResponse): void {
    const fault = this.take(stepOf(req.method, req.url));
    if (fault === 'error') {
      res.writeHead(500, { 'Content-Type': 'application/json' }).end(JSON.stringify({ message: 'injected engine fault' }));
      req.resume();
      return;
    }
    if (fault === 'reset') {
      req.socket.destroy();
      return;
    }
    if (fault === 'redirect') {
      res.writeHead(301, { Location: '/images/json', 'Content-Length': '0' }).end();
      req.resume();
      return;
    }
    if (fault === 'silent') {
      req.resume();
      return;
    }
    const upstream = request({ socketPath: UPSTREAM, method: req.method, path: req.url, headers: req.headers }, (answer) => {
      res.writeHead(answer.statusCode ?? 502, answer.headers);
      if (fault === 'cut') {
        // The answer's head, and at most its first chunk, then the connection breaks.
        answer.once('data', (chunk: Buffer) => {
          res.write(chunk);
          res.socket?.destroy();
          answer.destroy();
        });
        answer.once('end', () => res.socket?.destroy());
        return;
      }
      answer.pipe(res);
    });
    upstream.on('error', () => res.socket?.destroy());
    res.on('close', () => upstream.destroy());
    req.pipe(upstream);
  }

  /** attach's hijacked connection: forwarded raw both ways (or faulted). */
  private upgrade(req: IncomingMessage, socket: Socket, head: Buffer): void {
    socket.on('error', () => undefined);
    const fault = this.take(stepOf(req.method, req.url));
    if (fault === 'error') {
      socket.end('HTTP/1.1 500 Internal Server Error\r\nContent-Type: application/json\r\nContent-Length: 35\r\n\r\n{"message":"injected engine fault"}');
      return;
    }
    if (fault === 'reset') {
      socket.destroy();
      return;
    }
    if (fault === 'redirect') {
      socket.end('HTTP/1.1 301 Moved Permanently\r\nLocation: /images/json\r\nContent-Length: 0\r\n\r\n');
      return;
    }
    if (fault === 'silent') return;
    const upstream = connect(UPSTREAM);
    upstream.on('error', () => socket.destroy());
    socket.on('close', () => upstream.destroy());
    upstream.on('close', () => socket.destroy());
    const lines = [`${req.method} ${req.url} HTTP/1.1`];
    for (let i = 0; i < req.rawHeaders.length; i += 2) lines.push(`${req.rawHeaders[i]}: ${req.rawHeaders[i + 1]}`);
    upstream.write(`${lines.join('\r\n')}\r\n\r\n`);
    if (head.length > 0) upstream.write(head);
    if (fault === 'cut') {
      // The upgrade's answer arrives, then the stream breaks.
      upstream.once('data', (chunk: Buffer) => {
        socket.write(chunk);
        socket.destroy();
      });
      socket.pipe(upstream);
      return;
    }
    upstream.pipe(socket);
    socket.pipe(upstream);
  }
}
