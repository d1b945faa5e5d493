/**
 * The histogram policy's memory across restarts: each fn's idle-time
 * histogram in a small table of the node's datastore (a full node's; a
 * pure runner has none and learns again after a restart). Loaded once when
 * the agent starts; a histogram that changed is written at most once per
 * FLUSH_MS (a minute), all changed fns in one write, and once more when
 * the agent closes. A write that fails is logged and tried again with the
 * next flush; it never touches a call.
 */
import type { Logger } from 'pino';
import type { Clock, Timer } from './clock.js';
import type { HistogramKeepAlive } from './keepalive.js';

/** One fn's stored histogram: `data` is HistogramSnapshot as JSON, validated when loaded. */
export interface StoredHistogram {
  readonly fnId: string;
  readonly data: string;
}

/**
 * Where histograms are kept (the datastore's SqlKeepAliveStore). Rejects
 * when the database does not answer; a fn that no longer exists may be
 * skipped silently.
 */
export interface HistogramStore {
  loadHistograms(): Promise<StoredHistogram[]>;
  saveHistograms(rows: readonly StoredHistogram[]): Promise<void>;
}

/** How often changed histograms are written. */
export const FLUSH_MS = 60_000;

export class HistogramPersistence {
  private timer: Timer | undefined;
  private flushing: Promise<void> = Promise.resolve();
  private closed = false;
  /** What a failed write held, written with the next. */
  private pending = new Map<string, StoredHistogram>();

  constructor(
    private readonly policy: HistogramKeepAlive,
    private readonly store: HistogramStore,
    private readonly clock: Clock,
    private readonly log: Logger,
  ) {}

  /** Loads what is stored (a row that does not fit is skipped), then writes changes every FLUSH_MS. Never rejects. */
  async start(): Promise<void> {
    try {
      const rows = await this.store.loadHistograms();
      let loaded = 0;
      for (const row of rows) {
        let parsed: unknown;
        try {
          parsed = JSON.parse(row.data);
        } catch {
          continue;
        }
        if (typeof row.fnId === 'string' && this.policy.load(row.fnId, parsed)) loaded++;
      }
      if (rows.length > 0) this.log.info({ loaded, stored: rows.length }, 'keep-alive histograms loaded');
    } catch (err) {
      this.log.warn({ err }, 'could not load the keep-alive histograms: they are learned again');
    }
    this.arm();
  }

  private arm(): void {
    if (this.closed) return;
    this.timer = this.clock.setTimeout(() => {
      this.timer = undefined;
      void this.flush().finally(() => this.arm());
    }, FLUSH_MS);
  }

  /** Writes the histograms that changed since the last write. Never rejects. */
  flush(): Promise<void> {
    this.flushing = this.flushing.then(async () => {
      for (const { fnId, snapshot } of this.policy.takeChanged()) this.pending.set(fnId, { fnId, data: JSON.stringify(snapshot) });
      if (this.pending.size === 0) return;
      const rows = [...this.pending.values()];
      this.pending = new Map();
      try {
        await this.store.saveHistograms(rows);
      } catch (err) {
        this.log.warn({ err, fns: rows.length }, 'could not store keep-alive histograms: tried again in a minute');
        // Newer ones (taken meanwhile) win over these.
        for (const row of rows) if (!this.pending.has(row.fnId)) this.pending.set(row.fnId, row);
      }
    });
    return this.flushing;
  }

  /** Stops the timer and writes what changed. Idempotent; never rejects. */
  async close(): Promise<void> {
    this.closed = true;
    this.timer?.clear();
    this.timer = undefined;
    await this.flush();
  }
}
