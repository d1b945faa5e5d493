/**
 * The secrets API (fnts's own; Fn has no secrets): an app's and a fn's
 * secrets are set, listed (names and times, never values) and deleted here:
 *
 *   PUT    /v2/apps/{appID}/secrets/{name}   {"value": "..."}  -> {"name", "created_at", "updated_at"}
 *   GET    /v2/apps/{appID}/secrets                           -> {"items": [{"name", "created_at", "updated_at"}]}
 *   DELETE /v2/apps/{appID}/secrets/{name}                    -> 204
 *   and the same under /v2/fns/{fnID}.
 *
 * and for a fleet's LBs (a token with the fleet right; admin too), the values a
 * fn's containers get, to hand to the runner that runs its call:
 *
 *   GET    /v2/runner/fns/{fnID}/secrets  -> {"version": "<CallFn.secretsVersion>", "secrets": {"NAME": "value"}}
 *
 * A change retires the containers of the fns it reaches, as a config change
 * does (published as a change of the app or fn): the next calls get
 * containers started with the new values. No value is ever logged or put in
 * an error, nor answered but to the fleet's endpoint: the body is parsed here
 * and its value handed on as bytes.
 */
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import type { Datastore, SecretStore } from '../datastore/index.js';
import { ApiError, E, now, parseJsonObject, secretToJson, secretValueFromJson, validateSecretName, type Changes, type SecretOwner } from '../models/index.js';
import { param, resource } from './routing.js';

export interface SecretsApiDeps {
  readonly datastore: Datastore;
  readonly secrets: SecretStore;
  /** Told after every change, so that the containers of the fns it reaches retire and lookups read the new version. */
  readonly changes?: Changes;
}

export function registerSecretsApi(app: FastifyInstance, deps: SecretsApiDeps): void {
  const { datastore: ds, secrets } = deps;

  /** Tells the change feed that `owner`'s secrets changed: for the agent and the lookup cache, like a change of the app or fn itself. */
  const changed = async (owner: SecretOwner): Promise<void> => {
    const feed = deps.changes;
    if (!feed) return;
    try {
      if (owner.kind === 'app') {
        const a = await ds.getAppById(owner.id);
        feed.publish({ kind: 'app', id: a.id, name: a.name });
      } else {
        const f = await ds.getFnById(owner.id);
        feed.publish({ kind: 'fn', id: f.id, appId: f.app_id });
      }
    } catch (err) {
      // Deleted meanwhile: its deletion was told, and took its secrets with it.
      if (!ApiError.is(err, E.AppsNotFound) && !ApiError.is(err, E.FnsNotFound)) throw err;
    }
  };

  // The fleet's: the values (its app's and its own, the fn's winning) with the version they are, read as one.
  resource(app, '/v2/runner/fns/:fnID/secrets', {
    GET: async (req, reply: FastifyReply) => {
      const fn = await ds.getFnById(param(req, 'fnID'));
      void reply.header('Cache-Control', 'no-store');
      return fleetSecrets(secrets, fn.app_id, fn.id);
    },
  });

  for (const [kind, path] of [
    ['app', '/v2/apps/:appID'],
    ['fn', '/v2/fns/:fnID'],
  ] as const) {
    const ownerOf = (req: FastifyRequest): SecretOwner => ({ kind, id: param(req, kind === 'app' ? 'appID' : 'fnID') });

    resource(app, `${path}/secrets`, {
      GET: async (req) => ({ items: (await secrets.listSecrets(ownerOf(req))).map(secretToJson) }),
    });

    resource(app, `${path}/secrets/:name`, {
      PUT: async (req) => {
        const owner = ownerOf(req);
        const name = param(req, 'name');
        validateSecretName(name);
        const value = secretValueFromJson(parseJsonObject(req.body as Buffer | undefined));
        const stored = await secrets.putSecret(owner, name, value, now());
        await changed(owner);
        return secretToJson(stored);
      },
      DELETE: async (req, reply: FastifyReply) => {
        const owner = ownerOf(req);
        await secrets.removeSecret(owner, param(req, 'name'));
        await changed(owner);
        return reply.code(204).send();
      },
    });
  }
}

/**
 * The secrets of fn `fnId` of app `appId` as an LB hands them to a runner,
 * with their version: read again until the version after the values is the
 * one before them, so that no write between the two reads pairs values with
 * another version than theirs.
 */
export async function fleetSecrets(store: Pick<SecretStore, 'valuesFor' | 'versionFor'>, appId: string, fnId: string): Promise<{ version: string; secrets: Record<string, string> }> {
  for (let tries = 0; ; tries++) {
    const before = await store.versionFor(appId, fnId);
    const values = await store.valuesFor(appId, fnId);
    const after = await store.versionFor(appId, fnId);
    if (before === after || tries >= 5) {
      if (before !== after) throw new ApiError(E.ServiceUnavailable, { message: `the secrets of fn ${fnId} keep changing: try again` });
      const out: Record<string, string> = {};
      // Values were set as UTF-8 text (models/secret.ts): they go back as that text.
      for (const [name, value] of values) out[name] = value.toString('utf8');
      return { version: after, secrets: out };
    }
  }
}
