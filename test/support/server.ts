/**
 * A real fnts server in the test process: production wiring (startServer),
 * a temporary SQLite file, the real Docker driver and agent, a real port.
 * Helpers create apps and fns and call them over HTTP; containers are found
 * by this server's owner label, and its agent's queues show what each fn's
 * calls are doing.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type Docker from 'dockerode';
import type { Logger } from 'pino';
import type { AgentSnapshot } from '../../src/agent/index.js';
import { compileConfig, type Config } from '../../src/config/index.js';
import { startServer, type RunningServer } from '../../src/roles/index.js';
import { TEST_AUTH_ENV, withTestToken } from './auth.js';
import { containersOfOwner } from './containers.js';
import { testRunTag } from './tag.js';

export interface Answer {
  status: number;
  headers: Headers;
  text: string;
  json: any;
  ms: number;
}

export interface TestServer {
  readonly url: string;
  readonly server: RunningServer;
  readonly config: Config;
  post(path: string, body: unknown): Promise<any>;
  app(body?: Record<string, unknown>): Promise<any>;
  fn(app: any, image: string, extra?: Record<string, unknown>): Promise<any>;
  call(path: string, init?: { method?: string; body?: unknown; headers?: Record<string, string> }): Promise<Answer>;
  invoke(fnId: string, body?: unknown, headers?: Record<string, string>): Promise<Answer>;
  /** Every container this server started, running or not. */
  containers(): Promise<Docker.ContainerInfo[]>;
  /** What the calls to `fnId` are doing now (waiting, starting, running), or undefined before its first call. */
  queue(fnId: string): AgentSnapshot['queues'][number] | undefined;
  close(): Promise<void>;
}

/**
 * Calls a server at `url` over HTTP (POST unless told), answering with the
 * status, headers, text, JSON (if it is) and time taken. /v2 requests carry
 * the test admin token unless the headers say otherwise (auth.ts).
 */
export function caller(url: string): TestServer['call'] {
  return async (path, init = {}) => {
    const t0 = performance.now();
    const res = await fetch(url + path, {
      method: init.method ?? 'POST',
      headers: withTestToken(path, init.headers),
      ...(init.body === undefined ? {} : { body: typeof init.body === 'string' ? init.body : JSON.stringify(init.body) }),
    });
    const text = await res.text();
    let json: unknown;
    try {
      json = JSON.parse(text);
    } catch {
      json = undefined;
    }
    return { status: res.status, headers: res.headers, text, json, ms: performance.now() - t0 };
  };
}

/** POSTs JSON through `call`, answering with the JSON answer; throws unless the status is 200. */
export function poster(call: TestServer['call']): TestServer['post'] {
  return async (path, body) => {
    const res = await call(path, { body, headers: { 'content-type': 'application/json' } });
    if (res.status !== 200) throw new Error(`POST ${path} answered ${res.status}: ${res.text}`);
    return res.json;
  };
}

let seq = 0;

/** `logger`: where the server logs (default: stdout at FNTS_TEST_LOG's level, else silent). */
export async function startTestServer(env: Record<string, string> = {}, logger?: Logger): Promise<TestServer> {
  const dir = mkdtempSync(join(tmpdir(), 'fnts-it-'));
  const config = compileConfig({
    FN_DB_URL: `sqlite3://${join(dir, 'fn.db')}`,
    FN_PORT: '0',
    FN_LISTEN_HOST: '127.0.0.1',
    // A runner's or pool manager's gRPC port: plaintext is allowed on loopback only.
    FNTS_GRPC_LISTEN_HOST: '127.0.0.1',
    FN_LOG_LEVEL: process.env['FNTS_TEST_LOG'] ?? 'silent',
    FN_IOFS_PATH: `/tmp/fnts-it/${process.pid}-${seq++}`,
    ...TEST_AUTH_ENV,
    ...testRunTag(),
    ...env,
  });
  const server = await startServer(config, logger);
  const url = `http://127.0.0.1:${server.port}`;

  const call = caller(url);

  const post = poster(call);

  let apps = 0;
  let fns = 0;
  return {
    url,
    server,
    config,
    call,
    post,
    app: (body = {}) => post('/v2/apps', { name: `app${apps++}`, ...body }),
    fn: (app, image, extra = {}) => post('/v2/fns', { app_id: app.id, name: `fn${fns++}`, image, ...extra }),
    invoke: (fnId, body = {}, headers = {}) => call(`/invoke/${fnId}`, { body, headers: { 'content-type': 'application/json', ...headers } }),
    containers: () => containersOfOwner(config.agent.owner),
    queue: (fnId) => server.agent!.snapshot().queues.find((q) => q.fnId === fnId),
    async close() {
      await server.close();
      rmSync(dir, { recursive: true, force: true });
    },
  };
}
