/**
 * How the invoke endpoints find what a call is made from, whichever role
 * serves them: a full node from its own datastore (server/lookup.ts), an LB
 * from the API node (lb/lookup.ts).
 */
import type { CallFn } from '../models/index.js';

/** What a call is made from: the fn's runtime fields, and the trigger it came through. */
export interface Target {
  readonly fn: CallFn;
  readonly triggerId?: string;
}

/**
 * Finds what a call is made from. Rules: a hit may be answered at once (not
 * a promise); a miss rejects with Fn's 404 (Fn not found, App not found,
 * Trigger not found); an implementation bounds how stale its answers are.
 */
export interface TargetLookup {
  /** The fn `fnId`. */
  byFn(fnId: string): Target | Promise<Target>;
  /** The fn behind the HTTP trigger `source` of app `appName`. */
  byTrigger(appName: string, source: string): Target | Promise<Target>;
}
