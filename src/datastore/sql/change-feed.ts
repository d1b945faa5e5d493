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
 *   read by the others' polls every POLL_MS (one indexed query that finds
 *   nothing most of the time); rows go after PRUNE_AFTER_MS.
 * - An in-memory SQLite database has no other process: nothing to do.
 *
 * What a node made comes back to it (a notification, a row): it is known by
 * its origin and not published twice. A node that lost its link for a
 * while (the database restarted) may have missed changes: once the link is
 * back it publishes a `reset`, and caches drop everything. A change that
 * could not be sent is kept (up to MAX_OUTBOX) and sent again every second.
 */
import { randomBytes } from 'node:crypto';
import pg from 'pg';
import type { Logger } from 'pino';
import { isResourceChange, type Changes, type ResourceChange } from '../../models/index.js';
import { sql } from 'kysely';
import { postgresPoolConfig } from './servers.js';
import type { SqlDatastore } from './store.js';

/** How often MySQL and SQLite files are asked for others' changes. */
export const POLL_MS = 100;
const PRUNE_EVERY_MS = 60_000;
const PRUNE_AFTER_MS = 10 * 60_000;
/** Rows read per poll. */
const ROWS_PER_POLL = 500;
/** Ids below the highest seen that a poll reads again: a row whose insert committed after a higher id's is still seen. */
const LOOKBACK_IDS = 200;
const MAX_OUTBOX = 1000;
const RESEND_MS = 1000;
const CHANNEL = 'fnts_changes';
/** How often, at most, the link logs that it cannot reach the database. */
const SAY_EVERY_MS = 10_000;

export interface ChangeLink {
  /** Stops listening and polling. Idempotent. */
  close(): Promise<void>;
}

interface Wire {
  /** The node that made the change. */
  readonly o: string;
  readonly c: ResourceChange;
}

/** Links `local` to every other node on `store`'s database; resolves once it listens. */
export async function linkChanges(store: SqlDatastore, local: Changes, log: Logger): Promise<ChangeLink> {
  if (store.kind === 'sqlite' && store.shown.endsWith(':memory:')) return { close: async () => undefined };
  const link = new SharedChanges(store, local, log);
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
  private listener: pg.Client | undefined;
  private reconnect: NodeJS.Timeout | undefined;
  /** Poll: the highest id seen, and the ids seen within LOOKBACK_IDS below it. */
  private highest = 0;
  private readonly seen = new Set<number>();
  /** Set when the link broke: once it works again, a reset is published. */
  private broken = false;
  private saidAt = -Infinity;
  private polling = false;

  constructor(
    private readonly store: SqlDatastore,
    private readonly local: Changes,
    private readonly log: Logger,
  ) {
    this.unsubscribe = local.subscribe((change) => {
      if (this.relaying || change.kind === 'reset') return;
      void this.send(change);
    });
  }

  async start(): Promise<void> {
    if (this.store.kind === 'postgres') await this.listen();
    else {
      const row = await this.store
        .database()
        .selectFrom('changes')
        .select((eb) => eb.fn.max('id').as('id'))
        .executeTakeFirst();
      this.highest = Number(row?.id ?? 0);
      this.poller = setInterval(() => void this.poll(), POLL_MS);
      this.poller.unref();
      this.pruner = setInterval(() => void this.prune(), PRUNE_EVERY_MS);
      this.pruner.unref();
    }
  }

  private say(err: unknown, what: string): void {
    if (Date.now() - this.saidAt < SAY_EVERY_MS) return;
    this.saidAt = Date.now();
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
      if (this.outbox.length < MAX_OUTBOX) this.outbox.push(change);
      this.resend ??= setTimeout(() => {
        this.resend = undefined;
        for (const c of this.outbox.splice(0)) void this.send(c);
      }, RESEND_MS);
      this.resend.unref();
    }
  }

  // ---- Postgres: LISTEN on a connection of the link's own

  private async listen(): Promise<void> {
    const client = new pg.Client(postgresPoolConfig(this.store.location as Extract<SqlDatastore['location'], { kind: 'postgres' }>, 1));
    this.listener = client;
    const lost = (err?: unknown): void => {
      if (this.listener !== client) return;
      this.listener = undefined;
      this.broken = true;
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

  private async poll(): Promise<void> {
    if (this.polling || this.closed) return;
    this.polling = true;
    try {
      const rows = await this.store
        .database()
        .selectFrom('changes')
        .select(['id', 'origin', 'body'])
        .where('id', '>', this.highest - LOOKBACK_IDS)
        .orderBy('id')
        .limit(ROWS_PER_POLL)
        .execute();
      this.healed();
      for (const row of rows) {
        const id = Number(row.id);
        if (this.seen.has(id) || id <= this.highest - LOOKBACK_IDS) continue;
        this.seen.add(id);
        if (id > this.highest) this.highest = id;
        if (row.origin !== this.origin) this.receive(row.body);
      }
      for (const id of this.seen) if (id <= this.highest - LOOKBACK_IDS) this.seen.delete(id);
    } catch (err) {
      if (!this.closed) {
        this.broken = true;
        this.say(err, 'could not read the change feed of the database; trying again');
      }
    } finally {
      this.polling = false;
    }
  }

  private async prune(): Promise<void> {
    try {
      await this.store
        .database()
        .deleteFrom('changes')
        .where('at', '<', Date.now() - PRUNE_AFTER_MS)
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
    clearTimeout(this.resend);
    clearTimeout(this.reconnect);
    const client = this.listener;
    this.listener = undefined;
    await client?.end().catch(() => undefined);
  }
}
