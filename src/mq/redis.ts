/**
 * The queue of detached calls on Redis (FN_MQ_URL=redis://host:port/db), for
 * fleets whose nodes share no database file. Every step is one Lua script,
 * so workers on many nodes never lease one item twice, and a lease taken
 * back is counted (redeliveries) in the script that takes it. Times are the
 * caller's clock (passed in), as the SQL queue's are. Bodies are stored as
 * the bytes they are (Redis strings are binary-safe): no encoding, no copy
 * beyond the one the connection writes.
 *
 *   <p>item:<id>   hash: fn_id, call_json, body, attempts, max_attempts, redeliveries, state, holder, reason
 *   <p>ready       sorted set: id by the time it may run
 *   <p>leased      sorted set: id by the end of its lease
 *   <p>dead        sorted set: id by the time it died
 *   <p>key:<fn>:<k> the call an idempotency key named, and when (kept a day)
 *
 * Durability is the Redis server's: an item is kept across a Redis restart
 * only with its append-only file on (persistence(); the server refuses to
 * start without it unless FNTS_MQ_ALLOW_VOLATILE=true).
 */
import { Redis, ReplyError } from 'ioredis';
import { IDEMPOTENCY_WINDOW_MS, type Queue, type QueuedCall } from './queue.js';

const ENQUEUE_LUA = `
local p, id, now = KEYS[1], ARGV[1], tonumber(ARGV[2])
if ARGV[7] ~= '' then
  local k = p .. 'key:' .. ARGV[3] .. ':' .. ARGV[7]
  local prev = redis.call('GET', k)
  if prev then
    local sep = string.find(prev, ':', 1, true)
    local at = tonumber(string.sub(prev, sep + 1))
    if at > now - tonumber(ARGV[8]) then return string.sub(prev, 1, sep - 1) end
  end
  redis.call('SET', k, id .. ':' .. now, 'PX', ARGV[8])
end
redis.call('HSET', p .. 'item:' .. id, 'fn_id', ARGV[3], 'call_json', ARGV[4], 'body', ARGV[5], 'attempts', 0, 'max_attempts', ARGV[6], 'redeliveries', 0, 'state', 'ready')
redis.call('ZADD', p .. 'ready', now, id)
return id`;

// A lapsed lease (its holder died, or its call outlived it) first, then the oldest ready item: taken
// from ready first, a lapsed item waited for the whole backlog (the queue contract's lapsed-lease case).
const RESERVE_LUA = `
local p, now, lease, holder = KEYS[1], tonumber(ARGV[1]), tonumber(ARGV[2]), ARGV[3]
local from = 'leased'
local id = redis.call('ZRANGEBYSCORE', p .. 'leased', '-inf', now, 'LIMIT', 0, 1)[1]
if not id then
  from = 'ready'
  id = redis.call('ZRANGEBYSCORE', p .. 'ready', '-inf', now, 'LIMIT', 0, 1)[1]
end
if not id then return false end
local fn = redis.call('HGET', p .. 'item:' .. id, 'fn_id')
for i = 4, #ARGV - 1, 2 do
  if ARGV[i] == fn then lease = tonumber(ARGV[i + 1]) end
end
redis.call('ZREM', p .. from, id)
redis.call('ZADD', p .. 'leased', now + lease, id)
redis.call('HSET', p .. 'item:' .. id, 'state', 'leased', 'holder', holder)
if from == 'leased' then redis.call('HINCRBY', p .. 'item:' .. id, 'redeliveries', 1) end
local f = redis.call('HMGET', p .. 'item:' .. id, 'fn_id', 'call_json', 'body', 'attempts', 'max_attempts', 'redeliveries')
return { id, f[1], f[2], f[3], f[4], f[5], f[6] or '0' }`;

const EXTEND_LUA = `
local p = KEYS[1]
if redis.call('ZSCORE', p .. 'leased', ARGV[1]) then redis.call('ZADD', p .. 'leased', tonumber(ARGV[2]), ARGV[1]) end
return 1`;

const ACK_LUA = `
local p = KEYS[1]
redis.call('ZREM', p .. 'leased', ARGV[1])
redis.call('ZREM', p .. 'ready', ARGV[1])
redis.call('ZREM', p .. 'dead', ARGV[1])
redis.call('DEL', p .. 'item:' .. ARGV[1])
return 1`;

const RETRY_LUA = `
local p, id = KEYS[1], ARGV[1]
if redis.call('EXISTS', p .. 'item:' .. id) == 0 then return 0 end
redis.call('ZREM', p .. 'leased', id)
redis.call('ZADD', p .. 'ready', tonumber(ARGV[2]), id)
redis.call('HSET', p .. 'item:' .. id, 'state', 'ready', 'holder', '')
if ARGV[3] == '1' then redis.call('HINCRBY', p .. 'item:' .. id, 'attempts', 1) end
return 1`;

const DEAD_LUA = `
local p, id = KEYS[1], ARGV[1]
if redis.call('EXISTS', p .. 'item:' .. id) == 0 then return 0 end
redis.call('ZREM', p .. 'leased', id)
redis.call('ZREM', p .. 'ready', id)
redis.call('ZADD', p .. 'dead', tonumber(ARGV[3]), id)
redis.call('HSET', p .. 'item:' .. id, 'state', 'dead', 'holder', '', 'reason', ARGV[2])
redis.call('HINCRBY', p .. 'item:' .. id, 'attempts', 1)
return 1`;

const REDRIVE_LUA = `
local p, id = KEYS[1], ARGV[2]
local f = redis.call('HMGET', p .. 'item:' .. id, 'state', 'fn_id')
if f[1] ~= 'dead' or f[2] ~= ARGV[1] then return 0 end
redis.call('HSET', p .. 'item:' .. id, 'state', 'ready', 'attempts', 0, 'redeliveries', 0, 'reason', '')
redis.call('ZREM', p .. 'dead', id)
redis.call('ZADD', p .. 'ready', tonumber(ARGV[3]), id)
return 1`;

const RELEASE_LUA = `
local p, id = KEYS[1], ARGV[1]
if redis.call('HGET', p .. 'item:' .. id, 'holder') ~= ARGV[2] or not redis.call('ZSCORE', p .. 'leased', id) then return 0 end
redis.call('ZREM', p .. 'leased', id)
redis.call('ZADD', p .. 'ready', tonumber(ARGV[3]), id)
redis.call('HSET', p .. 'item:' .. id, 'state', 'ready', 'holder', '')
redis.call('HINCRBY', p .. 'item:' .. id, 'redeliveries', 1)
return 1`;

/** At most this many dead items go per script run: a large backlog is pruned over several runs, never in one long stall of Redis. */
const PRUNE_BATCH = 500;

const PRUNE_DEAD_LUA = `
local p = KEYS[1]
local ids = redis.call('ZRANGEBYSCORE', p .. 'dead', '-inf', '(' .. ARGV[1], 'LIMIT', 0, tonumber(ARGV[2]))
for _, id in ipairs(ids) do
  redis.call('DEL', p .. 'item:' .. id)
  redis.call('ZREM', p .. 'dead', id)
end
return #ids`;

const HAS_LUA = `
local p, found = KEYS[1], {}
for i, id in ipairs(ARGV) do found[i] = redis.call('EXISTS', p .. 'item:' .. id) end
return found`;

/**
 * What keeps a Redis server's data across its own restart, as its CONFIG
 * says: `durable` with the append-only file fsynced every second or on
 * every write; `volatile` otherwise (nothing, or RDB snapshots only: what
 * was written since the last snapshot is lost); `unknown` when the server
 * refuses CONFIG (renamed, or not allowed for this user).
 */

/** The scripts, as commands of the connection (defineCommand): by name. */
const SCRIPTS = {
  fnts_enqueue: ENQUEUE_LUA,
  fnts_reserve: RESERVE_LUA,
  fnts_extend: EXTEND_LUA,
  fnts_ack: ACK_LUA,
  fnts_retry: RETRY_LUA,
  fnts_dead: DEAD_LUA,
  fnts_redrive: REDRIVE_LUA,
  fnts_release: RELEASE_LUA,
  fnts_prune_dead: PRUNE_DEAD_LUA,
  fnts_has: HAS_LUA,
} as const;
type Script = keyof typeof SCRIPTS;
type Commands = Record<Script | `${Script}Buffer`, (...args: Array<string | number | Buffer>) => Promise<unknown>>;

export type RedisPersistence =
  | { readonly kind: 'durable'; readonly appendfsync: string }
  | { readonly kind: 'volatile'; readonly appendonly: string; readonly appendfsync: string; readonly save: string }
  | { readonly kind: 'unknown'; readonly refusal: string };

export class RedisQueue implements Queue {
  private readonly redis: Redis;

  constructor(
    url: string,
    private readonly prefix = 'fnts:mq:',
    private readonly now: () => number = Date.now,
  ) {
    // Commands wait while the connection is re-established rather than fail at once. Commands
    // sent in one turn of the event loop go in one round trip (detached calls accepted together).
    this.redis = new Redis(url, { maxRetriesPerRequest: 3, lazyConnect: false, enableAutoPipelining: true });
    this.redis.on('error', () => undefined);
    // Sent by their digest (EVALSHA), the script itself only when the server does not know it yet.
    for (const [name, lua] of Object.entries(SCRIPTS)) this.redis.defineCommand(name, { numberOfKeys: 1, lua });
  }

  private run(script: Script, ...args: Array<string | number | Buffer>): Promise<unknown> {
    return (this.redis as unknown as Commands)[script](this.prefix, ...args);
  }

  async enqueue(item: Omit<QueuedCall, 'attempts' | 'redeliveries'>, key?: string): Promise<string> {
    return (await this.run('fnts_enqueue', item.id, this.now(), item.fnId, item.callJson, item.body, item.maxAttempts, key ?? '', IDEMPOTENCY_WINDOW_MS)) as string;
  }

  async reserve(leaseMs: number, holder: string, leaseByFn?: ReadonlyMap<string, number>): Promise<QueuedCall | undefined> {
    const byFn = leaseByFn ? [...leaseByFn].flat() : [];
    // Answered as bytes: the body comes back as the Buffer it went in as.
    const r = (await (this.redis as unknown as Commands)['fnts_reserveBuffer'](this.prefix, this.now(), leaseMs, holder, ...byFn)) as Buffer[] | null;
    if (!r) return undefined;
    const [id, fnId, callJson, body, attempts, maxAttempts, redeliveries] = r as [Buffer, Buffer, Buffer, Buffer, Buffer, Buffer, Buffer];
    return {
      id: id.toString(),
      fnId: fnId.toString(),
      callJson: callJson.toString(),
      body,
      attempts: Number(attempts.toString()),
      maxAttempts: Number(maxAttempts.toString()),
      redeliveries: Number(redeliveries.toString()),
    };
  }

  /** Up to `max` leases in one round trip (the scripts go in one pipeline). */
  async reserveBatch(max: number, leaseMs: number, holder: string, leaseByFn?: ReadonlyMap<string, number>): Promise<QueuedCall[]> {
    const got = await Promise.all(Array.from({ length: max }, () => this.reserve(leaseMs, holder, leaseByFn)));
    return got.filter((c): c is QueuedCall => c !== undefined);
  }

  async releaseDead(isDead: (holder: string) => boolean): Promise<number> {
    const leased = await this.redis.zrange(`${this.prefix}leased`, 0, -1);
    let released = 0;
    for (const id of leased) {
      const holder = await this.redis.hget(`${this.prefix}item:${id}`, 'holder');
      if (!holder || !isDead(holder)) continue;
      released += Number(await this.run('fnts_release', id, holder, this.now()));
    }
    return released;
  }

  async extend(id: string, leaseMs: number): Promise<void> {
    await this.run('fnts_extend', id, this.now() + leaseMs);
  }

  async ack(id: string): Promise<void> {
    await this.run('fnts_ack', id);
  }

  async retry(id: string, delayMs: number, counted: boolean): Promise<void> {
    await this.run('fnts_retry', id, this.now() + delayMs, counted ? '1' : '0');
  }

  async dead(id: string, reason: string): Promise<void> {
    await this.run('fnts_dead', id, reason, this.now());
  }

  async redrive(fnId: string, id: string): Promise<boolean> {
    return Number(await this.run('fnts_redrive', fnId, id, this.now())) === 1;
  }

  async pruneDead(before: number): Promise<number> {
    let removed = 0;
    for (;;) {
      const n = Number(await this.run('fnts_prune_dead', before, PRUNE_BATCH));
      removed += n;
      if (n < PRUNE_BATCH) return removed;
    }
  }

  async has(ids: readonly string[]): Promise<Set<string>> {
    const held = new Set<string>();
    for (let i = 0; i < ids.length; i += PRUNE_BATCH) {
      const batch = ids.slice(i, i + PRUNE_BATCH);
      const found = (await this.run('fnts_has', ...batch)) as number[];
      batch.forEach((id, j) => {
        if (found[j] === 1) held.add(id);
      });
    }
    return held;
  }

  async size(): Promise<number> {
    const [ready, leased] = await Promise.all([this.redis.zcard(`${this.prefix}ready`), this.redis.zcard(`${this.prefix}leased`)]);
    return ready + leased;
  }

  async oldestReadyAt(): Promise<number | undefined> {
    // The ready set is scored by the time each item becomes ready.
    const [, score] = await this.redis.zrangebyscore(`${this.prefix}ready`, '-inf', this.now(), 'WITHSCORES', 'LIMIT', 0, 1);
    return score === undefined ? undefined : Number(score);
  }

  /**
   * The server's persistence settings (CONFIG GET). Throws when the server
   * cannot be reached; a server that answers CONFIG with an error is `unknown`.
   */
  async persistence(): Promise<RedisPersistence> {
    let settings: Map<string, string>;
    try {
      const pairs = [
        ...((await this.redis.config('GET', 'appendonly')) as string[]),
        ...((await this.redis.config('GET', 'appendfsync')) as string[]),
        ...((await this.redis.config('GET', 'save')) as string[]),
      ];
      settings = new Map();
      for (let i = 0; i + 1 < pairs.length; i += 2) settings.set(pairs[i]!, pairs[i + 1]!);
    } catch (err) {
      if (err instanceof ReplyError) return { kind: 'unknown', refusal: (err as Error).message };
      throw err;
    }
    const appendonly = settings.get('appendonly') ?? '';
    const appendfsync = settings.get('appendfsync') ?? '';
    if (appendonly === 'yes' && (appendfsync === 'everysec' || appendfsync === 'always')) return { kind: 'durable', appendfsync };
    return { kind: 'volatile', appendonly, appendfsync, save: settings.get('save') ?? '' };
  }

  async close(): Promise<void> {
    await this.redis.quit().catch(() => this.redis.disconnect());
  }
}
