/**
 * Real sockets for what inject() cannot show: broken framing, oversized
 * headers, unknown methods, stalled uploads. `listenApi` starts the API
 * in-process on a real port (in-memory SQLite, no agent) and keeps its log
 * lines; `exchange` writes raw bytes and reads the answer until the server
 * closes the connection.
 */
import { connect } from 'node:net';
import { pino } from 'pino';
import type { FastifyInstance } from 'fastify';
import { compileConfig } from '../../src/config/index.js';
import { openSqlite, type Datastore } from '../../src/datastore/index.js';
import { buildServer } from '../../src/server/index.js';
import { testTokens, TEST_AUTH_ENV } from './auth.js';

export interface LogLine {
  level: number;
  msg: string;
  [key: string]: unknown;
}

export interface ListeningApi {
  readonly port: number;
  readonly app: FastifyInstance;
  readonly datastore: Datastore;
  /** Every line logged so far, at debug level and above. */
  readonly logs: LogLine[];
  close(): Promise<void>;
}

export async function listenApi(env: Record<string, string> = {}): Promise<ListeningApi> {
  const datastore = await openSqlite(':memory:');
  const config = compileConfig({ FN_LOG_LEVEL: 'debug', ...TEST_AUTH_ENV, ...env });
  const logs: LogLine[] = [];
  const logger = pino({ level: 'debug' }, { write: (line: string) => void logs.push(JSON.parse(line) as LogLine) });
  const tokens = await testTokens(datastore);
  const app = await buildServer({ config, api: { datastore, tokens }, logger });
  await app.listen({ port: 0, host: '127.0.0.1' });
  const address = app.server.address();
  const port = typeof address === 'object' && address ? address.port : 0;
  return {
    port,
    app,
    datastore,
    logs,
    async close() {
      await app.close();
      tokens.registry.close();
      await datastore.close();
    },
  };
}

export interface RawAnswer {
  /** 0 when nothing parseable came back. */
  readonly status: number;
  readonly headers: Readonly<Record<string, string>>;
  readonly body: string;
  /** The body parsed as JSON, or undefined. */
  readonly json: any;
  /** Everything the server sent. */
  readonly raw: string;
  /** Milliseconds from the last write until the server closed the connection. */
  readonly closedAfterMs: number;
}

/**
 * Writes `parts` in order (each as its own write) and resolves when the
 * server closes the connection; rejects if it is still open after `deadlineMs`.
 */
export function exchange(port: number, parts: ReadonlyArray<string | Buffer>, deadlineMs = 10_000): Promise<RawAnswer> {
  return new Promise<RawAnswer>((resolve, reject) => {
    const socket = connect({ port, host: '127.0.0.1' });
    const chunks: Buffer[] = [];
    let lastWrite = performance.now();
    const timer = setTimeout(() => {
      socket.destroy();
      reject(new Error(`the server kept the connection open for ${deadlineMs} ms; received: ${Buffer.concat(chunks).toString('latin1').slice(0, 300)}`));
    }, deadlineMs);
    socket.on('data', (c: Buffer) => chunks.push(c));
    // A reset after the answer (the server closed with our bytes unread) still counts as closed.
    socket.on('error', () => undefined);
    socket.on('close', () => {
      clearTimeout(timer);
      resolve(parse(Buffer.concat(chunks).toString('latin1'), performance.now() - lastWrite));
    });
    socket.once('connect', () => {
      for (const p of parts) socket.write(p);
      lastWrite = performance.now();
    });
  });
}

function parse(raw: string, closedAfterMs: number): RawAnswer {
  const split = raw.indexOf('\r\n\r\n');
  const head = split < 0 ? raw : raw.slice(0, split);
  const body = split < 0 ? '' : raw.slice(split + 4);
  const [statusLine = '', ...lines] = head.split('\r\n');
  const status = Number(/^HTTP\/1\.1 (\d{3})/.exec(statusLine)?.[1] ?? 0);
  const headers: Record<string, string> = {};
  for (const line of lines) {
    const colon = line.indexOf(':');
    if (colon > 0) headers[line.slice(0, colon).toLowerCase()] = line.slice(colon + 1).trim();
  }
  let json: unknown;
  try {
    json = JSON.parse(Buffer.from(body, 'latin1').toString('utf8'));
  } catch {
    json = undefined;
  }
  return { status, headers, body, json, raw, closedAfterMs };
}
