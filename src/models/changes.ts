/**
 * Changes made to apps, fns and triggers, told to whoever keeps something
 * derived from them: the fn/trigger lookup cache drops its entries, the agent
 * retires the containers of a changed fn.
 */
import type { Logger } from 'pino';
import { tellEach } from './listeners.js';

export type ResourceChange =
  | { readonly kind: 'app'; readonly id: string; readonly name: string }
  | { readonly kind: 'fn'; readonly id: string; readonly appId: string }
  | { readonly kind: 'trigger'; readonly id: string; readonly appId: string }
  /**
   * Anything may have changed: changes made elsewhere may have been missed
   * (the node lost its link to the database's change feed for a while).
   * Caches drop everything; containers stay (a call of a changed fn finds
   * no container of its new definition and gets a new one).
   */
  | { readonly kind: 'reset' };

/** Whether `v` is a ResourceChange (one that came over the wire). */
export function isResourceChange(v: unknown): v is ResourceChange {
  const c = v as { kind?: unknown; id?: unknown; name?: unknown; appId?: unknown } | null;
  if (typeof c !== 'object' || c === null) return false;
  if (c.kind === 'reset') return true;
  if (typeof c.id !== 'string') return false;
  if (c.kind === 'app') return typeof c.name === 'string';
  return (c.kind === 'fn' || c.kind === 'trigger') && typeof c.appId === 'string';
}

/**
 * Told after every successful change.
 *
 * Rules: called synchronously by whoever made the change, so it must be
 * cheap and must not block; it must not throw (one that does is logged and
 * skipped: the change stands, the other listeners are told).
 */
export type ChangeListener = (change: ResourceChange) => void;

export interface ChangeFeed {
  /** Returns a function that stops the listener. */
  subscribe(listener: ChangeListener): () => void;
}

/** The change feed of one process. */
export class Changes implements ChangeFeed {
  private readonly listeners = new Set<ChangeListener>();

  constructor(private readonly log?: Logger) {}

  subscribe(listener: ChangeListener): () => void {
    this.listeners.add(listener);
    return () => this.listeners.delete(listener);
  }

  publish(change: ResourceChange): void {
    tellEach(this.listeners, (listener) => listener(change), this.log, 'a change listener', { change });
  }
}
