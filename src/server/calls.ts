/**
 * The calls API, Fn's v2 calls contract (docs/operations.md#the-calls-api,
 * as Fn served it until April 2019 and the fn CLI 0.5.x reads it):
 *
 *   GET /v2/fns/{fnID}/calls                  newest first; per_page, cursor, from_time, to_time
 *   GET /v2/fns/{fnID}/calls/{callID}
 *   GET /v2/fns/{fnID}/calls/{callID}/log     JSON {call_id, log}, or the raw log for Accept: text/plain
 *   POST /v2/fns/{fnID}/calls/{callID}/retry  (fnts) runs a dead detached call again: 202 and its record, queued
 *   POST /v2/runner/calls                     (fnts) LBs hand in the records and logs of the calls they placed:
 *                                             {"records": [Call...], "logs": [{callId, fnId, appId, created, log}]}
 *                                             (as Fn 2018's /v1/runner/finish, a node-to-node endpoint: keep the
 *                                             API port on the fleet's private network)
 */
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import type { CallLogEntry, CallStore, Datastore } from '../datastore/index.js';
import { ApiError, E, type CallRecord, type ErrorDef, RECORD_BATCH_BYTES } from '../models/index.js';
import type { Queue } from '../mq/index.js';
import { pageParams, param, queryString, resource } from './routing.js';

export interface CallsApiDeps {
  readonly datastore: Datastore;
  readonly calls: CallStore;
  /** The queue of detached calls, for redriving dead ones. */
  readonly queue?: Queue;
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

const STATUSES = new Set(['queued', 'running', 'success', 'error', 'timeout', 'cancelled']);

function isText(v: unknown): v is string {
  return typeof v === 'string' && v.length > 0 && v.length <= 255;
}

/** A batch from an LB, checked field by field: 400 naming the first bad item. */
function recordBatch(body: unknown): { records: CallRecord[]; logs: CallLogEntry[] } {
  const bad = (what: string): ApiError => new ApiError(E.InvalidJSON, { message: `Invalid call records: ${what}` });
  let parsed: unknown;
  try {
    parsed = JSON.parse(Buffer.isBuffer(body) ? body.toString() : '');
  } catch {
    throw bad('not JSON');
  }
  const b = parsed as { records?: unknown; logs?: unknown } | null;
  if (typeof b !== 'object' || b === null) throw bad('not an object');
  const records = b.records ?? [];
  const logs = b.logs ?? [];
  if (!Array.isArray(records) || !Array.isArray(logs)) throw bad('records and logs must be lists');
  records.forEach((r: Partial<CallRecord> | null, i) => {
    if (typeof r !== 'object' || r === null || !isText(r.id) || !isText(r.fn_id) || !isText(r.app_id) || !STATUSES.has(r.status ?? '') || typeof r.created_at !== 'string') {
      throw bad(`records[${i}] needs id, fn_id, app_id, status and created_at`);
    }
  });
  logs.forEach((l: Partial<CallLogEntry> | null, i) => {
    if (typeof l !== 'object' || l === null || !isText(l.callId) || !isText(l.fnId) || !isText(l.appId) || typeof l.created !== 'number' || typeof l.log !== 'string') {
      throw bad(`logs[${i}] needs callId, fnId, appId, created and log`);
    }
  });
  return { records: records as CallRecord[], logs: logs as CallLogEntry[] };
}

export function registerCallsApi(app: FastifyInstance, deps: CallsApiDeps): void {
  const { datastore, calls } = deps;

  // Batches carry logs (each up to FN_MAX_LOG_SIZE_BYTES): LBs send at most RECORD_BATCH_BYTES each.
  app.post('/v2/runner/calls', { bodyLimit: 2 * RECORD_BATCH_BYTES }, async (req, reply) => {
    const { records, logs } = recordBatch(req.body);
    await calls.insert(records, logs);
    return reply.code(204).send();
  });

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
