/**
 * The queue of detached calls: a call is persisted before its caller hears
 * 202, and delivered at least once to a worker that leases it, runs it and
 * acknowledges it once its outcome is stored. Every implementation must pass
 * `runQueueContract` (mq/queue.contract.ts).
 *
 *   enqueue ──▶ ready ──reserve(lease)──▶ leased ──ack──▶ (gone)
 *                 ▲                         │  │
 *                 ├──── retry(delay) ───────┘  └──dead──▶ dead ──pruneDead──▶ (gone)
 *                 │                                         │
 *                 ├──── lease taken back (holder died) ─────┤ (redeliveries + 1)
 *                 └──── redrive ◀───────────────────────────┘
 *
 * Rules every implementation MUST keep:
 * - enqueue() resolves only once the item is durable; it throws if it is not.
 * - reserve() hands an item to one worker at a time: until its lease ends,
 *   no other reserve() returns it. A lease that ends without ack, retry or
 *   dead (the worker died) makes the item ready again; releaseDead() ends
 *   the leases of holders known dead at once.
 * - A lease taken back, by releaseDead() or by a reserve() that takes an
 *   item whose lease ended, adds one to the item's `redeliveries`, in the
 *   same atomic step: a call whose deliveries keep killing their process is
 *   counted even when every process that leased it died (the worker
 *   dead-letters it past FNTS_ASYNC_MAX_REDELIVERIES instead of running it).
 * - retry() makes the item ready again after `delayMs`; `counted` adds an
 *   attempt. dead() keeps the item, out of delivery, with its reason and
 *   the time it died, until pruneDead() removes it. redrive() makes a dead
 *   item ready again, attempts and redeliveries back to 0.
 * - Items are reserved oldest ready first.
 */

export interface QueuedCall {
  readonly id: string;
  readonly fnId: string;
  /** Fn's models.Call JSON of the call (callToJson). */
  readonly callJson: string;
  readonly body: Buffer;
  /** Attempts made so far (not counting one in progress). */
  readonly attempts: number;
  readonly maxAttempts: number;
  /** How often a lease on it was taken back from a holder that died (see the rules above). */
  readonly redeliveries: number;
}

/** How long an idempotency key names its call. */
export const IDEMPOTENCY_WINDOW_MS = 24 * 3600_000;

export interface Queue {
  /**
   * Queues `item`, or, when `key` named a call of the same fn within
   * IDEMPOTENCY_WINDOW_MS, queues nothing. Resolves with the id of the call
   * that stands for this submission: the item's, or the earlier one's.
   */
  enqueue(item: Omit<QueuedCall, 'attempts' | 'redeliveries'>, key?: string): Promise<string>;
  /** Makes a dead item ready again with its attempts and redeliveries reset; false when no dead item has this id (and fn). */
  redrive(fnId: string, id: string): Promise<boolean>;
  /** The oldest ready item, leased for `leaseMs` to `holder` (a process); undefined when none is ready. */
  reserve(leaseMs: number, holder: string): Promise<QueuedCall | undefined>;
  /**
   * Up to `max` of the oldest ready items, oldest first, leased as reserve()
   * leases one, in one round trip where the backend allows. An item of a fn
   * `leaseByFn` names is leased for that fn's time rather than `leaseMs`
   * (a worker that knows how long a fn's calls may run leases them for that
   * from the start, with no extend() before it runs them).
   */
  reserveBatch(max: number, leaseMs: number, holder: string, leaseByFn?: ReadonlyMap<string, number>): Promise<QueuedCall[]>;
  /**
   * Ends at once the leases of holders `isDead` says are gone (a server
   * killed mid-call, restarted): their items are ready again, each with one
   * more redelivery. Returns how many.
   */
  releaseDead(isDead: (holder: string) => boolean): Promise<number>;
  /** Extends a lease still held. */
  extend(id: string, leaseMs: number): Promise<void>;
  /**
   * Removes the item, body and all. Acknowledgements that come together
   * may share one round trip (one statement, one pipeline): each resolves
   * only once its own item is gone, and throws if it could not be removed.
   */
  ack(id: string): Promise<void>;
  retry(id: string, delayMs: number, counted: boolean): Promise<void>;
  dead(id: string, reason: string): Promise<void>;
  /** Removes the items dead since before `before` (ms since the epoch), bodies and all; resolves with how many. */
  pruneDead(before: number): Promise<number>;
  /** Which of `ids` the queue holds, in any state (dead ones included). */
  has(ids: readonly string[]): Promise<Set<string>>;
  /** Ready and leased items (not dead ones). */
  size(): Promise<number>;
  /** Since when (ms since the epoch) the longest-waiting ready item has been ready to run; undefined when none is. */
  oldestReadyAt(): Promise<number | undefined>;
  /** Releases the connection, if the queue holds one of its own. Idempotent. */
  close(): Promise<void>;
}
