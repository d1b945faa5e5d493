/**
 * The CallStore keeps call records and their logs (Fn's calls API). Every
 * implementation must pass `runCallStoreContract` (datastore/calls.contract.ts).
 *
 * Rules every implementation MUST keep:
 * - Records and logs are written in batches (insert) by a writer off the
 *   call path; writing a record whose id exists replaces it (a detached
 *   call's record moves from queued to its outcome) and keeps its log. A
 *   log may be stored before its record.
 * - Lookups of a missing record throw `CallNotFound`, of a missing log
 *   `CallLogNotFound`; a record of another fn is missing too.
 * - Lists are newest first (created_at, then id, descending), `perPage` at
 *   most, filtered by created_at within [fromTime, toTime] when given, and
 *   carry `nextCursor` exactly when more items follow.
 * - prune() removes records (and their logs) created before `before`, and
 *   beyond the newest `perFn` records of each fn.
 */
import type { CallRecord } from '../models/index.js';
import type { Page, PageRequest } from './datastore.js';

export interface CallFilter extends PageRequest {
  readonly fnId: string;
  /** Only calls created at or after this time (RFC 3339). */
  readonly fromTime?: string | undefined;
  /** Only calls created at or before this time (RFC 3339). */
  readonly toTime?: string | undefined;
}

export interface CallLogEntry {
  readonly callId: string;
  readonly fnId: string;
  readonly appId: string;
  /** The call's creation, in ms since the epoch. */
  readonly created: number;
  readonly log: string;
}

export interface CallStore {
  /** Stores records and logs, one batch. */
  insert(records: readonly CallRecord[], logs?: readonly CallLogEntry[]): Promise<void>;
  /**
   * The same, with each record already its JSON: the recorder serializes a
   * record when its call ends, so nothing of the call lives on until the
   * batch is written.
   */
  insertSerialized(records: readonly string[], logs?: readonly CallLogEntry[]): Promise<void>;
  getCall(fnId: string, callId: string): Promise<CallRecord>;
  listCalls(filter: CallFilter): Promise<Page<CallRecord>>;
  getLog(fnId: string, callId: string): Promise<string>;
  /** Returns how many records were removed. */
  prune(before: string, perFn: number): Promise<number>;
  /**
   * Records whose status is `queued` and that were created before `before`
   * (RFC 3339), oldest first (created_at, then id), after `after` when
   * given; at most `limit`. For the reconciler of detached calls.
   */
  queuedBefore(before: string, limit: number, after?: { readonly createdAt: string; readonly id: string }): Promise<CallRecord[]>;
  /**
   * Writes each of `records` over the stored record of its id only while
   * that one's status is still `queued`, each as one atomic step (a record
   * that moved on meanwhile is left alone); resolves with how many were written.
   */
  replaceQueued(records: readonly CallRecord[]): Promise<number>;
}
