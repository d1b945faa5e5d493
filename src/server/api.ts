/**
 * Fn's REST API v2: apps, fns and triggers, with Fn's paths, fields, status
 * codes and messages (docs/architecture.md#the-rest-api).
 */
import type { FastifyInstance, FastifyRequest } from 'fastify';
import type { Datastore } from '../datastore/index.js';
import {
  ApiError,
  appPatchFromJson,
  applyAppPatch,
  applyFnPatch,
  applyTriggerPatch,
  appToJson,
  E,
  FN_INVOKE_ENDPOINT_ANNOTATION,
  fnPatchFromJson,
  fnToJson,
  newAppFromJson,
  newFnFromJson,
  newTriggerFromJson,
  parseJsonObject,
  TRIGGER_HTTP_ENDPOINT_ANNOTATION,
  triggerPatchFromJson,
  triggerToJson,
  type App,
  type Changes,
  type Fn,
  type ResourceChange,
  type Trigger,
} from '../models/index.js';
import { baseUrl, pageParams, param, queryString, resource } from './routing.js';

export interface ApiDeps {
  readonly datastore: Datastore;
  readonly publicUrl: string | undefined;
  /** Told after every successful change, so caches of fns and apps can drop stale entries and containers of a changed fn retire. */
  readonly changes?: Changes;
}

function body(req: FastifyRequest): ReturnType<typeof parseJsonObject> {
  return parseJsonObject(req.body as Buffer | undefined);
}

export function registerApi(app: FastifyInstance, deps: ApiDeps): void {
  const ds = deps.datastore;
  const changed = (c: ResourceChange): void => deps.changes?.publish(c);

  const fnJson = (req: FastifyRequest, fn: Fn): Record<string, unknown> => fnToJson(fn, { [FN_INVOKE_ENDPOINT_ANNOTATION]: `${baseUrl(req, deps.publicUrl)}/invoke/${fn.id}` });

  // Names and sources are stored decoded; the URL escapes what a request line cannot carry (non-ASCII, say).
  const triggerJson = (req: FastifyRequest, t: Trigger, owner: App): Record<string, unknown> =>
    triggerToJson(t, { [TRIGGER_HTTP_ENDPOINT_ANNOTATION]: `${baseUrl(req, deps.publicUrl)}${encodeURI(`/t/${owner.name}${t.source}`)}` });

  // ---- apps

  resource(app, '/v2/apps', {
    GET: async (req) => {
      const page = await ds.listApps({ ...pageParams(req.query), name: queryString(req.query, 'name') || undefined });
      // A token limited to some apps sees only those (server/auth.ts).
      const limit = req.principal?.apps;
      const items = limit === undefined ? page.items : page.items.filter((a) => limit.includes(a.name));
      return { items: items.map(appToJson), ...(page.nextCursor ? { next_cursor: page.nextCursor } : {}) };
    },
    POST: async (req) => appToJson(await ds.insertApp(newAppFromJson(body(req)))),
  });

  resource(app, '/v2/apps/:appID', {
    GET: async (req) => appToJson(await ds.getAppById(param(req, 'appID'))),
    PUT: async (req) => {
      const id = param(req, 'appID');
      const patch = appPatchFromJson(body(req));
      if (patch.id && patch.id !== id) throw new ApiError(E.AppsIDMismatch);
      const updated = await ds.updateApp(id, (current) => applyAppPatch(current, patch));
      changed({ kind: 'app', id, name: updated.name });
      return appToJson(updated);
    },
    DELETE: async (req, reply) => {
      const id = param(req, 'appID');
      const existing = await ds.getAppById(id);
      await ds.removeApp(id);
      changed({ kind: 'app', id, name: existing.name });
      return reply.code(204).send();
    },
  });

  // ---- fns

  resource(app, '/v2/fns', {
    GET: async (req) => {
      const appId = queryString(req.query, 'app_id');
      if (!appId) throw new ApiError(E.FnsMissingAppID);
      const page = await ds.listFns({ ...pageParams(req.query), appId, name: queryString(req.query, 'name') || undefined });
      return { items: page.items.map((f) => fnJson(req, f)), ...(page.nextCursor ? { next_cursor: page.nextCursor } : {}) };
    },
    POST: async (req) => fnJson(req, await ds.insertFn(newFnFromJson(body(req)))),
  });

  resource(app, '/v2/fns/:fnID', {
    GET: async (req) => fnJson(req, await ds.getFnById(param(req, 'fnID'))),
    PUT: async (req) => {
      const id = param(req, 'fnID');
      const patch = fnPatchFromJson(body(req));
      if (patch.id && patch.id !== id) throw new ApiError(E.FnsIDMismatch);
      const updated = await ds.updateFn(id, (current) => applyFnPatch(current, patch));
      changed({ kind: 'fn', id, appId: updated.app_id });
      return fnJson(req, updated);
    },
    DELETE: async (req, reply) => {
      const id = param(req, 'fnID');
      const existing = await ds.getFnById(id);
      await ds.removeFn(id);
      changed({ kind: 'fn', id, appId: existing.app_id });
      return reply.code(204).send();
    },
  });

  // ---- triggers

  resource(app, '/v2/triggers', {
    GET: async (req) => {
      const appId = queryString(req.query, 'app_id');
      if (!appId) throw new ApiError(E.TriggerMissingAppID);
      const page = await ds.listTriggers({
        ...pageParams(req.query),
        appId,
        fnId: queryString(req.query, 'fn_id') || undefined,
        name: queryString(req.query, 'name') || undefined,
      });
      // All items share one app; an unknown app simply has no triggers.
      const owner = page.items.length > 0 ? await ds.getAppById(appId) : undefined;
      return {
        items: owner ? page.items.map((t) => triggerJson(req, t, owner)) : [],
        ...(page.nextCursor ? { next_cursor: page.nextCursor } : {}),
      };
    },
    POST: async (req) => {
      const created = await ds.insertTrigger(newTriggerFromJson(body(req)));
      changed({ kind: 'trigger', id: created.id, appId: created.app_id });
      return triggerJson(req, created, await ds.getAppById(created.app_id));
    },
  });

  resource(app, '/v2/triggers/:triggerID', {
    GET: async (req) => {
      const t = await ds.getTriggerById(param(req, 'triggerID'));
      return triggerJson(req, t, await ds.getAppById(t.app_id));
    },
    PUT: async (req) => {
      const id = param(req, 'triggerID');
      const patch = triggerPatchFromJson(body(req));
      if (patch.id && patch.id !== id) throw new ApiError(E.TriggerIDMismatch);
      const updated = await ds.updateTrigger(id, (current) => applyTriggerPatch(current, patch));
      changed({ kind: 'trigger', id, appId: updated.app_id });
      return triggerJson(req, updated, await ds.getAppById(updated.app_id));
    },
    DELETE: async (req, reply) => {
      const id = param(req, 'triggerID');
      const existing = await ds.getTriggerById(id);
      await ds.removeTrigger(id);
      changed({ kind: 'trigger', id, appId: existing.app_id });
      return reply.code(204).send();
    },
  });

  // Fn's LB finds a trigger's fn here (Fn's hybrid client); fnts's LB too.
  // Both send the source whole after `{type}/`, its own leading slash kept
  // (/triggerBySource/http//hello for /hello), and Fn's API looks up the rest
  // of the path as it is. A rest without that slash (fnts LBs before they
  // sent Fn's form) names the source without its slash.
  app.get('/v2/runner/apps/:appID/triggerBySource/:type/*', async (req) => {
    const appId = param(req, 'appID');
    const rest = (req.params as Record<string, string>)['*'] ?? '';
    const source = rest.startsWith('/') ? rest : `/${rest}`;
    const t = await ds.getTriggerBySource(appId, param(req, 'type'), source);
    return triggerJson(req, t, await ds.getAppById(appId));
  });
}
