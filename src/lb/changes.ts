/**
 * The LB's watch on its API node's changes (GET /v2/runner/changes,
 * server/changes.ts): one long poll at a time, each answered as soon as
 * something changed on the API node (or on another node of its database),
 * or after WAIT_MS with nothing. Each change (or reset) empties the LB's
 * lookup cache; while the watch works the cache keeps answers long, and
 * when it does not (the API node is away, or has no such endpoint: an
 * older fnts, Fn's own) the cache falls back to FNTS_LB_CACHE_MSECS.
 */
import { setTimeout as sleep } from 'node:timers/promises';
import type { Logger } from 'pino';
import { askApi } from './lookup.js';

/** How long the API node holds a poll with nothing to say. */
const WAIT_MS = 25_000;
/** After a failure, the next try comes this long later (doubling up to MAX_BACKOFF_MS). */
const FIRST_BACKOFF_MS = 500;
const MAX_BACKOFF_MS = 10_000;
/** An API node without the endpoint is asked again this seldom (it may be upgraded). */
const ABSENT_RETRY_MS = 60_000;

export interface ChangeWatchOptions {
  readonly apiUrl: string;
  readonly token: string | undefined;
  readonly log: Logger;
  /** Something changed (or may have: `reset`): drop what is cached. Must not throw. */
  readonly onChange: () => void;
  /** Whether changes reach the LB now. Must not throw. */
  readonly onLive: (live: boolean) => void;
}

export class ApiChangeWatch {
  private readonly stop = new AbortController();
  private loop: Promise<void> | undefined;
  private live = false;

  constructor(private readonly o: ChangeWatchOptions) {}

  start(): void {
    this.loop ??= this.run().catch((err: unknown) => this.o.log.error({ err }, 'the watch on the API node changes stopped'));
  }

  private setLive(live: boolean): void {
    if (live === this.live) return;
    this.live = live;
    this.o.onLive(live);
  }

  /** Waits `ms`, or until the watch is closed. */
  private async pause(ms: number): Promise<void> {
    // timers/promises removes its abort listener when the time is up (one added per pause would pile up over a long outage).
    await sleep(ms, undefined, { signal: this.stop.signal, ref: false }).catch(() => undefined);
  }

  private async run(): Promise<void> {
    const base = this.o.apiUrl.replace(/\/+$/, '');
    let cursor: string | undefined;
    let backoff = FIRST_BACKOFF_MS;
    while (!this.stop.signal.aborted) {
      const query = cursor === undefined ? '?wait=0' : `?after=${encodeURIComponent(cursor)}&wait=${WAIT_MS}`;
      let answer: Awaited<ReturnType<typeof askApi>>;
      try {
        answer = await askApi(base, this.o.token, `/v2/runner/changes${query}`, { timeoutMs: WAIT_MS + 10_000, what: 'for its changes', signal: this.stop.signal });
      } catch (err) {
        if (this.stop.signal.aborted) return;
        if (this.live) this.o.log.warn({ err: err instanceof Error ? err.message : String(err) }, 'the API node changes do not reach this LB: its lookups are kept for FNTS_LB_CACHE_MSECS meanwhile');
        this.setLive(false);
        cursor = undefined;
        await this.pause(backoff);
        backoff = Math.min(backoff * 2, MAX_BACKOFF_MS);
        continue;
      }
      const json = answer.json ?? {};
      if (!answer.ok || typeof json['cursor'] !== 'string' || !Array.isArray(json['changes'])) {
        // No such endpoint (404: an older fnts, or Fn's own server), or an answer not ours: lookups keep the fixed cache time.
        this.setLive(false);
        cursor = undefined;
        await this.pause(answer.status === 404 ? ABSENT_RETRY_MS : backoff);
        backoff = Math.min(backoff * 2, MAX_BACKOFF_MS);
        continue;
      }
      backoff = FIRST_BACKOFF_MS;
      cursor = json['cursor'];
      // A reset (a first answer, or anything missed) or any change: the cache starts over.
      if (json['reset'] === true || json['changes'].length > 0) this.o.onChange();
      this.setLive(true);
    }
  }

  async close(): Promise<void> {
    this.stop.abort();
    await this.loop;
  }
}
