/**
 * An in-process API server on an in-memory SQLite datastore, driven through
 * Fastify's inject() (no ports), with small helpers for the common calls.
 */
import type { FastifyInstance, InjectOptions } from 'fastify';
import { expect } from 'vitest';
import { pino } from 'pino';
import { compileConfig } from '../../src/config/index.js';
import { openSqlite, type Datastore } from '../../src/datastore/index.js';
import { buildServer } from '../../src/server/index.js';
import { testTokens, TEST_AUTH_ENV, withTestToken } from './auth.js';

export interface Reply {
  status: number;
  headers: Record<string, unknown>;
  body: any;
  raw: string;
}

export interface TestApi {
  app: FastifyInstance;
  datastore: Datastore;
  call(method: InjectOptions['method'], url: string, payload?: unknown, headers?: Record<string, string>): Promise<Reply>;
  createApp(body: Record<string, unknown>): Promise<any>;
  createFn(body: Record<string, unknown>): Promise<any>;
  createTrigger(body: Record<string, unknown>): Promise<any>;
  /** Asserts Fn's error answer: this status, `{"message": message}`, as JSON. */
  expectError(method: InjectOptions['method'], url: string, payload: unknown, status: number, message: string): Promise<void>;
  close(): Promise<void>;
}

export async function startApi(env: Record<string, string> = {}): Promise<TestApi> {
  const datastore = await openSqlite(':memory:');
  const config = compileConfig({ FN_LOG_LEVEL: 'silent', ...TEST_AUTH_ENV, ...env });
  const tokens = await testTokens(datastore);
  const app = await buildServer({ config, api: { datastore, tokens }, logger: pino({ level: 'silent' }) });

  const call: TestApi['call'] = async (method, url, payload, headers = {}) => {
    const res = await app.inject({
      method,
      url,
      headers: withTestToken(url, { host: 'fnts.test:8080', ...(payload !== undefined && typeof payload !== 'string' ? { 'content-type': 'application/json' } : {}), ...headers }),
      ...(payload === undefined ? {} : { payload: typeof payload === 'string' ? payload : JSON.stringify(payload) }),
    });
    let body: unknown;
    try {
      body = res.body === '' ? undefined : JSON.parse(res.body);
    } catch {
      body = res.body;
    }
    return { status: res.statusCode, headers: res.headers, body, raw: res.body };
  };

  const created = async (url: string, payload: Record<string, unknown>): Promise<any> => {
    const res = await call('POST', url, payload);
    if (res.status !== 200) throw new Error(`POST ${url} ${JSON.stringify(payload)} answered ${res.status} ${res.raw}`);
    return res.body;
  };

  return {
    app,
    datastore,
    call,
    createApp: (b) => created('/v2/apps', b),
    createFn: (b) => created('/v2/fns', b),
    createTrigger: (b) => created('/v2/triggers', b),
    async expectError(method, url, payload, status, message) {
      const res = await call(method, url, payload);
      expect({ status: res.status, body: res.body }).toEqual({ status, body: { message } });
      expect(res.headers['content-type']).toMatch(/^application\/json/);
    },
    async close() {
      await app.close();
      tokens.registry.close();
      await datastore.close();
    },
  };
}
