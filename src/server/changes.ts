/**
 * GET /v2/runner/changes (fleet): what changed on this API node, for its
 * LBs, which drop their cached lookups on each change instead of waiting
 * out a fixed cache time. A long poll: it answers at once with the changes
 * after the caller's cursor, or waits up to `wait` ms for one.
 *
 *   GET /v2/runner/changes?after=<cursor>&wait=<ms>
 *   200 {"cursor": "<epoch>:<seq>", "changes": [ResourceChange...], "reset": false}
 *
 * The changes are those published in this process: made through its API,
 * or through another node on the same database (datastore/sql/change-feed.ts).
 * `reset: true` says "anything may have changed": the cursor is of another
 * process (this node restarted), older than what it keeps, or missing (a
 * first call), or the node's own link to the database's feed was broken.
 */
import type { FastifyInstance } from 'fastify';
import { randomBytes } from 'node:crypto';
import { ApiError, E, type ChangeFeed, type ResourceChange } from '../models/index.js';
import { resource } from './routing.js';

/** Changes kept for callers that fall behind. */
const KEPT = 1000;
/** The longest a caller may wait. */
export const MAX_WAIT_MS = 30_000;

export interface ChangesAnswer {
  readonly cursor: string;
  readonly changes: readonly ResourceChange[];
  readonly reset: boolean;
}

/** The recent changes of this process, numbered, and the callers waiting for the next. */
export class ChangeLog {
  private readonly epoch = randomBytes(6).toString('hex');
  private seq = 0;
  private readonly kept: Array<{ readonly seq: number; readonly change: ResourceChange }> = [];
  private readonly waiters = new Set<() => void>();
  private readonly unsubscribe: () => void;

  constructor(feed: ChangeFeed) {
    this.unsubscribe = feed.subscribe((change) => {
      this.kept.push({ seq: ++this.seq, change });
      if (this.kept.length > KEPT) this.kept.shift();
      for (const wake of [...this.waiters]) wake();
    });
  }

  private get cursor(): string {
    return `${this.epoch}:${this.seq}`;
  }

  /** The changes after `after`, or undefined when there are none yet. */
  private after(after: string | undefined): ChangesAnswer | undefined {
    const m = after === undefined ? null : /^([0-9a-f]+):(\d+)$/.exec(after);
    const from = m && m[1] === this.epoch ? Number(m[2]) : undefined;
    const oldest = this.kept[0]?.seq ?? this.seq + 1;
    if (from === undefined || from > this.seq || from < oldest - 1) return { cursor: this.cursor, changes: [], reset: true };
    if (from === this.seq) return undefined;
    const changes = this.kept.filter((k) => k.seq > from).map((k) => k.change);
    return { cursor: this.cursor, changes, reset: changes.some((c) => c.kind === 'reset') };
  }

  /** Answers at once when there is something after `after`, else when something comes, or after `waitMs` (no changes). */
  async next(after: string | undefined, waitMs: number, signal: AbortSignal): Promise<ChangesAnswer> {
    const now = this.after(after);
    if (now || waitMs <= 0) return now ?? { cursor: this.cursor, changes: [], reset: false };
    await new Promise<void>((resolve) => {
      const done = (): void => {
        clearTimeout(timer);
        this.waiters.delete(done);
        signal.removeEventListener('abort', done);
        resolve();
      };
      const timer = setTimeout(done, waitMs);
      this.waiters.add(done);
      signal.addEventListener('abort', done, { once: true });
    });
    return this.after(after) ?? { cursor: this.cursor, changes: [], reset: false };
  }

  close(): void {
    this.unsubscribe();
    for (const wake of [...this.waiters]) wake();
  }
}

export function registerChangesApi(app: FastifyInstance, log: ChangeLog): void {
  resource(app, '/v2/runner/changes', {
    GET: async (req) => {
      const q = req.query as Record<string, string | undefined>;
      const wait = q['wait'] === undefined ? 0 : Number(q['wait']);
      if (!Number.isInteger(wait) || wait < 0 || wait > MAX_WAIT_MS) throw new ApiError(E.MalformedRequest, { message: `wait must be a whole number of milliseconds from 0 to ${MAX_WAIT_MS}` });
      const closed = new AbortController();
      req.raw.once('close', () => closed.abort());
      return log.next(q['after'], wait, closed.signal);
    },
  });
}
