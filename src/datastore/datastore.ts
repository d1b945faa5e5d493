/**
 * The Datastore keeps apps, fns and triggers. Every implementation must pass
 * `runDatastoreContract` (datastore/contract.ts).
 *
 * Rules every implementation MUST keep:
 * - Records are stored and returned exactly as given (ids, timestamps and all);
 *   building and validating them is models/'s job.
 * - Lookups of a missing record throw the catalog's not-found error
 *   (`AppsNotFound`, `FnsNotFound`, `TriggerNotFound`).
 * - `update*` reads the current record, calls `update(current)` and writes its
 *   result in one transaction; an error thrown by `update` aborts the write.
 * - Integrity is enforced here, race-free: a fn's app exists; a trigger's app
 *   and fn exist and the fn belongs to the app; names are unique (app name
 *   globally, fn name per app, trigger name per fn); a trigger's type and
 *   source are unique per app. Deleting an app deletes its fns, triggers
 *   and secrets (its fns' too), deleting a fn deletes its triggers and
 *   secrets, atomically (secrets.ts).
 * - Lists are ordered by name (bytewise), `perPage` items at most, and carry
 *   `nextCursor` exactly when more items follow.
 * - After `close()` every method rejects.
 */
import type { App, Fn, Trigger } from '../models/index.js';

export interface Page<T> {
  readonly items: T[];
  /** Opaque; pass back as `cursor` for the next page. Absent on the last page. */
  readonly nextCursor?: string | undefined;
}

export interface PageRequest {
  /**
   * From a previous page's `nextCursor` of the same listing (apps, fns or
   * triggers); any other string throws `InvalidCursor`.
   */
  readonly cursor?: string | undefined;
  /** 1..100 */
  readonly perPage: number;
}

export interface AppFilter extends PageRequest {
  readonly name?: string | undefined;
}

export interface FnFilter extends PageRequest {
  readonly appId: string;
  readonly name?: string | undefined;
}

export interface TriggerFilter extends PageRequest {
  readonly appId: string;
  readonly fnId?: string | undefined;
  readonly name?: string | undefined;
}

export interface Datastore {
  /** Throws `AppsAlreadyExists` when the name is taken. */
  insertApp(app: App): Promise<App>;
  getAppById(id: string): Promise<App>;
  getAppByName(name: string): Promise<App>;
  listApps(filter: AppFilter): Promise<Page<App>>;
  updateApp(id: string, update: (current: App) => App): Promise<App>;
  /** Also removes the app's fns, triggers and secrets (its own and its fns'). */
  removeApp(id: string): Promise<void>;

  /**
   * Throws `AppsNotFound` when `fn.app_id` names no app, `FnsExists` when the
   * app has a fn of that name. The stored fn takes its app's shape.
   */
  insertFn(fn: Fn): Promise<Fn>;
  getFnById(id: string): Promise<Fn>;
  listFns(filter: FnFilter): Promise<Page<Fn>>;
  updateFn(id: string, update: (current: Fn) => Fn): Promise<Fn>;
  /** Also removes the fn's triggers and secrets. */
  removeFn(id: string): Promise<void>;

  /**
   * Throws `AppsNotFound`, `FnsNotFound`, `TriggerFnIDNotSameApp`,
   * `TriggerSourceExists` or `TriggerExists`.
   */
  insertTrigger(trigger: Trigger): Promise<Trigger>;
  getTriggerById(id: string): Promise<Trigger>;
  getTriggerBySource(appId: string, type: string, source: string): Promise<Trigger>;
  listTriggers(filter: TriggerFilter): Promise<Page<Trigger>>;
  /** The updated trigger passes the same checks as an inserted one. */
  updateTrigger(id: string, update: (current: Trigger) => Trigger): Promise<Trigger>;
  removeTrigger(id: string): Promise<void>;

  /** Idempotent. */
  close(): Promise<void>;
}
