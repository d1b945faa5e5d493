/**
 * The calls API, Fn's v2 calls contract (spec/fn-swagger-v2-calls-2019.yml,
 * as Fn served it until April 2019 and the fn CLI 0.5.x reads it):
 *
 *   GET /v2/fns/{fnID}/calls                  newest first; per_page, cursor, from_time, to_time
 *   GET /v2/fns/{fnID}/calls/{callID}
 *   GET /v2/fns/{fnID}/calls/{callID}/log     JSON {call_id, log}, or the raw log for Accept: text/plain
 *   POST /v2/fns/{fnID}/calls/{callID}/retry  (fnts) runs a dead detached call again: 202 and its record, queued
 */
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import type { CallStore, Datastore } from '../datastore/index.js';
import { ApiError, E, type CallRecord, type ErrorDef } from '../models/index.js';
import type { Queue } from '../mq/index.js';
import { pageParams, queryString, resource } from './routing.js';

export interface CallsApiDeps {
  readonly datastore: Datastore;
  readonly calls: CallStore;
  /** The queue of detached calls, for redriving dead ones. */
  readonly queue?: Queue;
}

function param(req: FastifyRequest, name: string): string {
  return (req.params as Record<string, string>)[name] ?? '';
}

/** Unix seconds as RFC 3339, for comparing with created_at; absent is undefined; anything else is Fn's 400. */
function epoch(req: FastifyRequest, name: string, bad: ErrorDef): string | undefined {
  const raw = queryString(req.query, name);
  if (raw === '') return undefined;
  if (!/^\d+$/.test(raw)) throw new ApiError(bad);
  const ms = Number(raw) * 1000;
  if (!Number.isSafeInteger(ms) || ms > 8.64e15) throw new ApiError(bad);
  return new Date(ms).toISOString();
}

/** What the client accepts of JSON and plain text; undefined when neither. */
function logFormat(req: FastifyRequest): 'json' | 'text' | undefined {
  const accept = req.headers.accept;
  if (!accept) return 'json';
  const types = accept.split(',').map((t) => t.split(';')[0]!.trim().toLowerCase());
  for (const t of types) {
    if (t === 'application/json' || t === 'application/*' || t === '*/*') return 'json';
    if (t === 'text/plain' || t === 'text/*') return 'text';
  }
  return undefined;
}

export function registerCallsApi(app: FastifyInstance, deps: CallsApiDeps): void {
  const { datastore, calls } = deps;

  resource(app, '/v2/fns/:fnID/calls', {
    GET: async (req) => {
      const fnId = param(req, 'fnID');
      await datastore.getFnById(fnId);
      const page = await calls.listCalls({
        ...pageParams(req.query),
        fnId,
        fromTime: epoch(req, 'from_time', E.InvalidFromTime),
        toTime: epoch(req, 'to_time', E.InvalidToTime),
      });
      return { items: page.items, ...(page.nextCursor ? { next_cursor: page.nextCursor } : {}) };
    },
  });

  resource(app, '/v2/fns/:fnID/calls/:callID', {
    GET: async (req) => {
      const fnId = param(req, 'fnID');
      await datastore.getFnById(fnId);
      return calls.getCall(fnId, param(req, 'callID'));
    },
  });

  const queue = deps.queue;
  if (queue) {
    resource(app, '/v2/fns/:fnID/calls/:callID/retry', {
      POST: async (req, reply) => {
        const fnId = param(req, 'fnID');
        const callId = param(req, 'callID');
        await datastore.getFnById(fnId);
        const record = await calls.getCall(fnId, callId);
        if (!(await queue.redrive(fnId, callId))) throw new ApiError(E.CallNotDead);
        const queued: CallRecord = { ...record, status: 'queued', attempts: 0 };
        await calls.insert([queued]);
        return reply.code(202).send(queued);
      },
    });
  }

  resource(app, '/v2/fns/:fnID/calls/:callID/log', {
    GET: async (req: FastifyRequest, reply: FastifyReply) => {
      const fnId = param(req, 'fnID');
      const callId = param(req, 'callID');
      const format = logFormat(req);
      if (!format) {
        return reply.code(406).send({ message: 'Not Acceptable: the call log is served as application/json or text/plain' });
      }
      await datastore.getFnById(fnId);
      const log = await calls.getLog(fnId, callId);
      if (format === 'text') return reply.type('text/plain; charset=utf-8').send(log);
      return { call_id: callId, log };
    },
  });
}
