/**
 * Every error Fastify can raise because of a request is answered in Fn's
 * words with a 4xx, never as a 500 "internal server error": the list is
 * Fastify's own (fastify.errorCodes), so a code an upgrade adds is caught here.
 */
import { errorCodes } from 'fastify';
import { pino } from 'pino';
import { describe, expect, it } from 'vitest';
import { E } from '../../src/models/index.js';
import { toHttpError } from '../../src/server/index.js';

type FastifyErrorClass = new (...args: string[]) => Error & { code: string; statusCode?: number };

// Fastify's 4xx codes that no request can cause: raised by setup code calling Fastify wrongly.
const SETUP_ONLY = new Set(['FST_ERR_CTP_INSTANCE_ALREADY_STARTED']);

const clientCodes = Object.entries(errorCodes as unknown as Record<string, FastifyErrorClass>)
  .map(([code, Ctor]) => [code, new Ctor('a', 'b', 'c')] as const)
  .filter(([code, err]) => (err.statusCode ?? 500) < 500 && !SETUP_ONLY.has(code));

describe('Fastify errors', () => {
  it("finds Fastify's client error codes", () => {
    expect(clientCodes.map(([code]) => code)).toEqual(expect.arrayContaining(['FST_ERR_CTP_BODY_TOO_LARGE', 'FST_ERR_BAD_URL', 'FST_ERR_MAX_PARAM_LENGTH']));
  });

  it.each(clientCodes)("answers %s with a 4xx in Fn's words", (_code, err) => {
    const logged: unknown[] = [];
    const log = pino({ level: 'error' }, { write: (line: string) => void logged.push(line) });
    const answer = toHttpError(err, log);
    expect(answer.status).toBeGreaterThanOrEqual(400);
    expect(answer.status).toBeLessThan(500);
    const catalog = Object.values(E).map((d) => d.message);
    expect(catalog).toContain(answer.body.message);
    expect(logged).toEqual([]);
  });

  it("answers a URL parameter over the router's limit 414, not 500", () => {
    const Ctor = (errorCodes as unknown as Record<string, FastifyErrorClass>)['FST_ERR_MAX_PARAM_LENGTH']!;
    expect(toHttpError(new Ctor('/v2/apps/x'), pino({ level: 'silent' }))).toEqual({ status: 414, headers: {}, body: { message: 'Request URI too long' } });
  });
});
