/**
 * The probes through Fastify's inject(), with the checks a full node makes
 * (datastore, Docker engine) over an in-memory datastore and the fake
 * driver, so the engine's failure can be had without stopping Docker.
 */
import { pino } from 'pino';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import type { FastifyInstance } from 'fastify';
import { compileConfig } from '../config/index.js';
import { openSqlite, type SqlDatastore } from '../datastore/index.js';
import { FakeDriver } from '../drivers/index.js';
import { datastoreCheck, engineCheck } from './probes.js';
import { buildServer } from './server.js';

let datastore: SqlDatastore;
let driver: FakeDriver;
let app: FastifyInstance;

beforeEach(async () => {
  datastore = await openSqlite(':memory:');
  driver = new FakeDriver({});
  app = await buildServer({
    config: compileConfig({ FN_LOG_LEVEL: 'silent' }),
    api: { datastore },
    logger: pino({ level: 'silent' }),
    checks: [datastoreCheck(datastore), engineCheck(driver)],
  });
});
afterEach(async () => {
  await app.close();
  await datastore.close();
});

const get = async (url: string, method: 'GET' | 'POST' | 'HEAD' = 'GET') => {
  const res = await app.inject({ method, url });
  return { status: res.statusCode, body: res.body === '' ? undefined : (res.json() as unknown) };
};

describe('GET /health and GET /ready', () => {
  it('answer 200 while the datastore and the engine answer', async () => {
    expect(await get('/health')).toEqual({ status: 200, body: { status: 'ok' } });
    expect(await get('/ready')).toEqual({ status: 200, body: { status: 'ready', checks: { datastore: 'ok', docker: 'ok' } } });
  });

  it('/ready answers 503 naming the engine when its ping fails; /health stays 200; ready again once it answers', async () => {
    driver.engineDown = 'connect ENOENT /var/run/docker.sock';
    expect(await get('/ready')).toEqual({
      status: 503,
      body: { status: 'not ready', checks: { datastore: 'ok', docker: 'the engine does not answer: connect ENOENT /var/run/docker.sock' } },
    });
    expect(await get('/health')).toEqual({ status: 200, body: { status: 'ok' } });
    driver.engineDown = undefined;
    expect((await get('/ready')).status).toBe(200);
  });

  it('are paths of their own: another method gets 405, not the 404 of an unknown path', async () => {
    expect(await get('/health', 'POST')).toEqual({ status: 405, body: { message: 'Method not allowed: POST /health' } });
    expect(await get('/ready', 'HEAD')).toMatchObject({ status: 405 });
  });
});
