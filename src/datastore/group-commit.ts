/**
 * Group commit for writes to a database (the queue's enqueues and acks,
 * mq/sql.ts; call records, sql/calls.ts and roles/common.ts): what callers
 * submit while a group is being written gathers as the next group, and
 * groups are written one at a time, in order, each in one round trip (or
 * one transaction). Each caller's promise settles once the group it joined
 * is written.
 *
 *   submit ──▶ open group ──(the one before it is written; lingerMs)──▶ write(items) ──▶ each caller settled
 *
 * A group the database refuses is written again item by item, so one bad
 * item fails no other; an error `sharedFailure` says would fail them all
 * anyway (a full disk, a database that does not answer) fails the whole
 * group at once.
 */

interface Part<I, R> {
  readonly item: I;
  resolve(result: R): void;
  reject(err: unknown): void;
}

export interface GroupCommitOptions<I, R> {
  /** Writes a group; resolves with each item's result, in order. May reject (see above). */
  readonly write: (items: readonly I[]) => Promise<readonly R[]>;
  /** Items per group at most: more wait for the next. */
  readonly maxItems: number;
  /** A group's size in bytes at most (an item alone may be larger). */
  readonly maxBytes?: number;
  readonly bytesOf?: (item: I) => number;
  /**
   * How long a group stays open after its first item before it is written
   * (0: written as soon as the group before it is): for submissions no
   * caller waits on, larger groups for a little latency.
   */
  readonly lingerMs?: number;
  readonly sharedFailure: (err: unknown) => boolean;
}

export class GroupCommit<I, R> {
  /** The group being gathered (joined while the one before it is written). */
  private open: { parts: Array<Part<I, R>>; bytes: number } | undefined;
  /** The group being written: one at a time, in order. Never rejects. */
  private writing: Promise<void> = Promise.resolve();

  constructor(private readonly o: GroupCommitOptions<I, R>) {}

  submit(item: I): Promise<R> {
    return new Promise<R>((resolve, reject) => {
      const part: Part<I, R> = { item, resolve, reject };
      const bytes = this.o.bytesOf?.(item) ?? 0;
      const open = this.open;
      if (open && open.parts.length < this.o.maxItems && open.bytes + bytes <= (this.o.maxBytes ?? Infinity)) {
        open.parts.push(part);
        open.bytes += bytes;
        return;
      }
      const group = { parts: [part], bytes };
      this.open = group;
      const linger = this.o.lingerMs ?? 0;
      const due = linger > 0 ? Promise.all([this.writing, new Promise((r) => setTimeout(r, linger))]) : this.writing;
      this.writing = due.then(() => {
        // From now on, submissions form the next group.
        if (this.open === group) this.open = undefined;
        return this.commit(group.parts);
      });
    });
  }

  /** Resolves once every group submitted so far is written (or refused); never rejects. */
  settled(): Promise<void> {
    return this.writing;
  }

  /** Writes a group; settles each caller. Never rejects. */
  private async commit(parts: ReadonlyArray<Part<I, R>>): Promise<void> {
    try {
      const results = await this.o.write(parts.map((p) => p.item));
      parts.forEach((p, i) => p.resolve(results[i]!));
    } catch (err) {
      if (parts.length === 1 || this.o.sharedFailure(err)) {
        for (const p of parts) p.reject(err);
        return;
      }
      for (const p of parts) await this.o.write([p.item]).then(([r]) => p.resolve(r!), p.reject);
    }
  }
}
