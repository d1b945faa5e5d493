/**
 * Changes made on one node, told to every node on the same database: the
 * nodes' lookup caches and agents listen to their own process's change
 * feed (models/changes.ts); this link carries what one process publishes
 * to the others, and publishes there what they made.
 *
 *   node A: API change ─▶ Changes.publish ─▶ link ─▶ database ─▶ link ─▶ Changes.publish (node B)
 *
 * - Postgres tells at once: NOTIFY on the pool, LISTEN on a connection of
 *   the link's own, made again (with backoff) when it breaks.
 * - MySQL and a SQLite file several processes share: a row in `changes`,
 *   read by the others' polls every POLL_MS (`id > highest seen`: one
 *   query on the primary key that finds nothing most of the time; see
 *   PollCursor for ids that commit out of order); rows go after
 *   PRUNE_AFTER_MS, removed by any node.
 * - An in-memory SQLite database has no other process: nothing to do.
 *
 * What a node made comes back to it (a notification, a row): it is known by
 * its origin and not published twice. A node that lost its link for a
 * while (the database restarted) may have missed changes: once the link is
 * back it publishes a `reset`, and caches drop everything. A change that
 * could not be sent is kept and sent again every second; past MAX_OUTBOX
 * of them, a reset is sent in their place.
 */
import { randomBytes } from 'node:crypto';
import { sql } from 'kysely';
import pg from 'pg';
import type { Logger } from 'pino';
import { isResourceChange, type Changes, type ResourceChange } from '../../models/index.js';
import { postgresPoolConfig } from './servers.js';
import type { SqlDatastore } from './store.js';

/** How often MySQL and SQLite files are asked for others' changes. */
export const POLL_MS = 100;
const PRUNE_EVERY_MS = 60_000;
const PRUNE_AFTER_MS = 10 * 60_000;
/** Rows read per poll. */
const ROWS_PER_POLL = 500;
/** How long an id skipped by a poll is still looked for (its insert may commit after a higher one's). */
const GAP_WAIT_MS = 60_000;
/** Skipped ids looked for at most (the newest kept). */
const MAX_GAPS = 1000;
const MAX_OUTBOX = 1000;
const RESEND_MS = 1000;
/** Postgres: how often the LISTEN connection is asked whether it still works, and how long it has to say so. */
const HEARTBEAT_MS = 15_000;
const HEARTBEAT_TIMEOUT_MS = 5_000;
const CHANNEL = 'fnts_changes';
/** How often, at most, the link logs that it cannot reach the database. */
const SAY_EVERY_MS = 10_000;

export interface ChangeLink {
  /** Stops listening and polling. Idempotent. */
  close(): Promise<void>;
}

/** The link's times (tests make them short). */
export interface ChangeLinkOptions {
  readonly pollMs?: number;
  readonly pruneEveryMs?: number;
  readonly pruneAfterMs?: number;
  readonly resendMs?: number;
  readonly heartbeatMs?: number;
}

interface Wire {
  /** The node that made the change. */
  readonly o: string;
  readonly c: ResourceChange;
}

/**
 * Which rows of `changes` a poll reads, and which it has already read.
 *
 * Ids are given in insert order but may commit out of it (MySQL: two nodes'
 * inserts at once), so a poll can see id 8 before id 7 exists. Reading
 * again every row below the highest seen would cost each poll rows every
 * time; instead the ids a poll skipped are kept, and looked for by the
 * next polls (`id > highest OR id IN (skipped)`) for GAP_WAIT_MS. Most
 * skipped ids are never filled (a rolled-back insert, an increment of
 * more than one): they are let go after that time, or past MAX_GAPS.
 * SQLite writes one at a time: it leaves no gaps.
 *
 *   take(id) ─▶ id a kept gap? ─yes─▶ new (the gap goes)
 *                  │ no
 *                  ▼
 *               id > highest? ─no─▶ seen before
 *                  │ yes
 *                  ▼
 *               the ids between become gaps; highest = id; new
 */
export class PollCursor {
  /** Skipped id → when it was skipped (ms, monotonic); in the order they were skipped. */
  private readonly gaps = new Map<number, number>();

  constructor(
    /** The highest id read. */
    public highest: number,
    private readonly waitMs = GAP_WAIT_MS,
    private readonly maxGaps = MAX_GAPS,
  ) {}

  /** The skipped ids still looked for at `now` (those older than the wait are let go). */
  awaited(now: number): number[] {
    for (const [id, at] of this.gaps) {
      if (now - at < this.waitMs) break;
      this.gaps.delete(id);
    }
    return [...this.gaps.keys()];
  }

  /** Whether row `id` (a poll's rows, taken in id order) is new to this cursor. */
  take(id: number, now: number): boolean {
    if (this.gaps.delete(id)) return true;
    if (id <= this.highest) return false;
    for (let gap = Math.max(this.highest + 1, id - this.maxGaps); gap < id; gap++) this.gaps.set(gap, now);
    for (const old of this.gaps.keys()) {
      if (this.gaps.size <= this.maxGaps) break;
      this.gaps.delete(old);
    }
    this.highest = id;
    return true;
  }
}

/** Links `local` to every other node on `store`'s database; resolves once it listens. */
export async function linkChanges(store: SqlDatastore, local: Changes, log: Logger, options: ChangeLinkOptions = {}): Promise<ChangeLink> {
  if (store.location.kind === 'sqlite' && store.location.path === ':memory:') return { close: async () => undefined };
  const link = new SharedChanges(store, local, log, options);
  await link.start();
  return link;
}

class SharedChanges implements ChangeLink {
  private readonly origin = randomBytes(8).toString('hex');
  private readonly unsubscribe: () => void;
  /** True while publishing a change that came from another node: it is not sent back out. */
  private relaying = false;
  private closed = false;
  private readonly outbox: ResourceChange[] = [];
  private resend: NodeJS.Timeout | undefined;
  private poller: NodeJS.Timeout | undefined;
  private pruner: NodeJS.Timeout | undefined;
  private heartbeat: NodeJS.Timeout | undefined;
  private listener: pg.Client | undefined;
  private reconnect: NodeJS.Timeout | undefined;
  /** Poll: what was read (undefined until the first poll that reached the database). */
  private cursor: PollCursor | undefined;
  /** Set when the link broke: once it works again, a reset is published. */
  private broken = false;
  private readonly saidAt = new Map<string, number>();
  /** What the link is doing with the database (a poll, sends): close() waits for it. */
  private readonly inFlight = new Set<Promise<void>>();
  private polling: Promise<void> | undefined;
  private readonly pollMs: number;
  private readonly pruneEveryMs: number;
  private readonly pruneAfterMs: number;
  private readonly resendMs: number;
  private readonly heartbeatMs: number;

  constructor(
    private readonly store: SqlDatastore,
    private readonly local: Changes,
    private readonly log: Logger,
    options: ChangeLinkOptions,
  ) {
    this.pollMs = options.pollMs ?? POLL_MS;
    this.pruneEveryMs = options.pruneEveryMs ?? PRUNE_EVERY_MS;
    this.pruneAfterMs = options.pruneAfterMs ?? PRUNE_AFTER_MS;
    this.resendMs = options.resendMs ?? RESEND_MS;
    this.heartbeatMs = options.heartbeatMs ?? HEARTBEAT_MS;
    this.unsubscribe = local.subscribe((change) => {
      // A reset published here is this node's own news (its link broke), not a change to tell.
      if (this.relaying || change.kind === 'reset') return;
      this.track(this.send(change));
    });
  }

  /** Keeps `work` (which never rejects) for close() to wait on. */
  private track(work: Promise<void>): void {
    this.inFlight.add(work);
    void work.finally(() => this.inFlight.delete(work));
  }

  async start(): Promise<void> {
    if (this.store.kind === 'postgres') return this.listen();
    // Changes made before this node started are of no interest: it has cached nothing yet.
    await this.poll();
    this.poller = setInterval(() => void this.poll(), this.pollMs);
    this.poller.unref();
    this.pruner = setInterval(() => this.track(this.prune()), this.pruneEveryMs);
    this.pruner.unref();
  }

  /** Logs `what` (each at most every SAY_EVERY_MS: a database away fails every poll). */
  private say(err: unknown, what: string): void {
    if (Date.now() - (this.saidAt.get(what) ?? -Infinity) < SAY_EVERY_MS) return;
    this.saidAt.set(what, Date.now());
    this.log.warn({ err: err instanceof Error ? err.message : String(err) }, what);
  }

  /** Publishes here a change another node made. */
  private relay(change: ResourceChange): void {
    this.relaying = true;
    try {
      this.local.publish(change);
    } finally {
      this.relaying = false;
    }
  }

  /** The link works (again): if it was broken, changes may have been missed. */
  private healed(): void {
    if (!this.broken) return;
    this.broken = false;
    this.log.info('the change feed of the database is back: caches start over');
    this.relay({ kind: 'reset' });
  }

  private receive(payload: string | undefined): void {
    let wire: Partial<Wire>;
    try {
      wire = JSON.parse(payload ?? '') as Partial<Wire>;
    } catch {
      return;
    }
    // Validated where it enters: anything else on the channel is not ours to act on.
    if (wire.o === this.origin || typeof wire.o !== 'string' || !isResourceChange(wire.c)) return;
    this.relay(wire.c);
  }

  private async send(change: ResourceChange): Promise<void> {
    if (this.closed) return;
    const body = JSON.stringify({ o: this.origin, c: change } satisfies Wire);
    try {
      const db = this.store.database();
      if (this.store.kind === 'postgres') await sql`select pg_notify(${CHANNEL}, ${body})`.execute(db);
      else await db.insertInto('changes').values({ origin: this.origin, body, at: Date.now() }).execute();
    } catch (err) {
      if (this.closed) return;
      this.say(err, 'could not tell the other nodes of a change; trying again every second');
      this.keep(change);
    }
  }

  /** A change to send again; too many (a long outage): one reset tells the others as much. */
  private keep(change: ResourceChange): void {
    if (this.outbox.length >= MAX_OUTBOX) this.outbox.splice(0, this.outbox.length, { kind: 'reset' });
    this.outbox.push(change);
    this.resend ??= setTimeout(() => {
      this.resend = undefined;
      for (const c of this.outbox.splice(0)) this.track(this.send(c));
    }, this.resendMs);
    this.resend.unref();
  }

  // ---- Postgres: LISTEN on a connection of the link's own

  private async listen(): Promise<void> {
    const client = new pg.Client({
      ...postgresPoolConfig(this.store.location as Extract<SqlDatastore['location'], { kind: 'postgres' }>, 1),
      // Seen as such in pg_stat_activity; a connection that stopped answering (a host gone, no reset sent) is found by the heartbeat.
      application_name: 'fnts changes',
      query_timeout: HEARTBEAT_TIMEOUT_MS,
    });
    this.listener = client;
    const lost = (err?: unknown): void => {
      if (this.listener !== client) return;
      this.listener = undefined;
      this.broken = true;
      clearInterval(this.heartbeat);
      client.end().catch(() => undefined);
      if (this.closed) return;
      this.say(err ?? new Error('connection ended'), 'lost the change feed of the database (LISTEN); listening again shortly');
      this.retryListen(250);
    };
    client.on('notification', (msg) => this.receive(msg.payload));
    client.on('error', lost);
    client.on('end', () => lost());
    try {
      await client.connect();
      await client.query(`LISTEN ${CHANNEL}`);
    } catch (err) {
      lost(err);
      return;
    }
    if (this.listener !== client) return;
    clearInterval(this.heartbeat);
    this.heartbeat = setInterval(() => void client.query('select 1').catch(lost), this.heartbeatMs);
    this.heartbeat.unref();
    this.healed();
  }

  private retryListen(delay: number): void {
    clearTimeout(this.reconnect);
    this.reconnect = setTimeout(() => {
      if (this.closed || this.listener) return;
      void this.listen().then(() => {
        if (!this.listener && !this.closed) this.retryListen(Math.min(delay * 2, 5000));
      });
    }, delay);
    this.reconnect.unref();
  }

  // ---- MySQL, SQLite files: a table polled

  /** One poll at a time: a slow one is not overtaken by the next. */
  private poll(): Promise<void> {
    if (this.closed) return Promise.resolve();
    if (!this.polling) {
      const polling = (this.polling = this.pollOnce().finally(() => (this.polling = undefined)));
      this.track(polling);
    }
    return this.polling;
  }

  private async pollOnce(): Promise<void> {
    try {
      const db = this.store.database();
      if (!this.cursor) {
        const row = await db
          .selectFrom('changes')
          .select((eb) => eb.fn.max('id').as('id'))
          .executeTakeFirst();
        this.cursor = new PollCursor(Number(row?.id ?? 0));
      }
      const cursor = this.cursor;
      const awaited = cursor.awaited(performance.now());
      const rows = await db
        .selectFrom('changes')
        .select(['id', 'origin', 'body'])
        .where((eb) => (awaited.length === 0 ? eb('id', '>', cursor.highest) : eb.or([eb('id', '>', cursor.highest), eb('id', 'in', awaited)])))
        .orderBy('id')
        .limit(ROWS_PER_POLL)
        .execute();
      this.healed();
      const now = performance.now();
      for (const row of rows) if (cursor.take(Number(row.id), now) && row.origin !== this.origin) this.receive(row.body);
    } catch (err) {
      if (!this.closed) {
        this.broken = true;
        this.say(err, 'could not read the change feed of the database; trying again');
      }
    }
  }

  private async prune(): Promise<void> {
    try {
      await this.store
        .database()
        .deleteFrom('changes')
        .where('at', '<', Date.now() - this.pruneAfterMs)
        .execute();
    } catch (err) {
      if (!this.closed) this.say(err, 'could not remove old rows of the change feed');
    }
  }

  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    this.unsubscribe();
    clearInterval(this.poller);
    clearInterval(this.pruner);
    clearInterval(this.heartbeat);
    clearTimeout(this.resend);
    clearTimeout(this.reconnect);
    const client = this.listener;
    this.listener = undefined;
    // A change sent as the node stops still reaches the others (the datastore closes after this).
    await Promise.all([client?.end().catch(() => undefined), ...this.inFlight]);
  }
}
