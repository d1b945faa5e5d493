/**
 * The live figures: one stream (GET /v2/console/stream, server-sent events
 * read through fetch so the token goes in a header, never in a URL) shared
 * by every view that shows them, open only while one does. The charts'
 * history starts with the server's last 15 minutes and grows with each event.
 */
import { useEffect, useState } from 'preact/hooks';
import { authHeaders, requireLogin } from './api.js';

export interface Quantiles {
  p50: number;
  p95: number;
  p99: number;
}
export type Containers = Record<'starting' | 'busy' | 'idle' | 'paused' | 'waiting', number>;
export interface FnFigures {
  app_id: string;
  fn_id: string;
  calls_per_s: number;
  errors_per_s: number;
  latency_ms: Quantiles | null;
  cold_share: number | null;
  containers: Containers;
}
export interface Figures {
  at: string;
  interval_s: number | null;
  calls_per_s: number | null;
  errors_per_s: number | null;
  latency_ms: Quantiles | null;
  cold_share: number | null;
  containers: Containers | null;
  memory: { used_bytes: number; total_bytes: number } | null;
  detached: { backlog: number | null; dead_letters: number | null } | null;
  fns: FnFigures[];
}
export interface Health {
  ready: boolean;
  checks: Record<string, string>;
}
export interface Point {
  at: number;
  calls_per_s: number | null;
  errors_per_s: number | null;
  p95_ms: number | null;
  busy: number | null;
  memory_used_bytes: number | null;
}
export interface Summary {
  role: string;
  runs_calls: boolean;
  scope: 'node' | 'apps';
  health: Health | null;
  figures: Figures;
  history: Point[] | null;
}

export interface LiveState {
  readonly summary: Summary | undefined;
  readonly figures: Figures | undefined;
  readonly health: Health | null | undefined;
  /** The node's points, oldest first (15 minutes). */
  readonly history: readonly Point[];
  /** Each fn's points since the stream opened. */
  readonly fnHistory: ReadonlyMap<string, readonly Point[]>;
  readonly connected: boolean;
  readonly error: string | undefined;
}

const WINDOW_MS = 15 * 60_000;
let state: LiveState = { summary: undefined, figures: undefined, health: undefined, history: [], fnHistory: new Map(), connected: false, error: undefined };
const watchers = new Set<(s: LiveState) => void>();
let stop: AbortController | undefined;

function set(next: Partial<LiveState>): void {
  state = { ...state, ...next };
  for (const w of watchers) w(state);
}

function trim<T extends { at: number }>(points: T[], now: number): T[] {
  const from = points.findIndex((p) => p.at >= now - WINDOW_MS);
  return from <= 0 ? points : points.slice(from);
}

function pointOf(f: Figures): Point {
  return {
    at: Date.parse(f.at),
    calls_per_s: f.calls_per_s,
    errors_per_s: f.errors_per_s,
    p95_ms: f.latency_ms?.p95 ?? null,
    busy: f.containers?.busy ?? null,
    memory_used_bytes: f.memory?.used_bytes ?? null,
  };
}

function onEvent(event: string, data: unknown): void {
  if (event === 'summary') {
    const s = data as Summary;
    set({ summary: s, figures: s.figures, health: s.health, history: s.history ?? [] });
  } else if (event === 'figures') {
    const f = data as Figures;
    const at = Date.parse(f.at);
    const fnHistory = new Map(state.fnHistory);
    for (const fn of f.fns) {
      const p: Point = { at, calls_per_s: fn.calls_per_s, errors_per_s: fn.errors_per_s, p95_ms: fn.latency_ms?.p95 ?? null, busy: fn.containers.busy, memory_used_bytes: null };
      fnHistory.set(fn.fn_id, trim([...(fnHistory.get(fn.fn_id) ?? []), p], at));
    }
    set({ figures: f, history: state.summary?.scope === 'node' ? trim([...state.history, pointOf(f)], at) : [], fnHistory });
  } else if (event === 'health') {
    set({ health: data as Health });
  } else if (event === 'error') {
    set({ error: (data as { message?: string }).message ?? 'stream refused' });
  }
}

/** Reads one stream until it ends or `signal` aborts. */
async function readStream(signal: AbortSignal): Promise<void> {
  const res = await fetch('/v2/console/stream', { headers: { ...authHeaders(), Accept: 'text/event-stream' }, signal, credentials: 'omit' });
  // The token was revoked or expired since the page opened: the login again.
  if (res.status === 401) requireLogin();
  if (!res.ok || !res.body) {
    let message = `${res.status} ${res.statusText}`;
    try {
      message = ((await res.json()) as { message?: string }).message ?? message;
    } catch {
      // the status line then
    }
    throw new Error(message);
  }
  set({ connected: true, error: undefined });
  const reader = res.body.pipeThrough(new TextDecoderStream()).getReader();
  let buffer = '';
  for (;;) {
    const { value, done } = await reader.read();
    if (done) return;
    buffer += value;
    let end: number;
    while ((end = buffer.indexOf('\n\n')) >= 0) {
      const block = buffer.slice(0, end);
      buffer = buffer.slice(end + 2);
      let event = 'message';
      let data = '';
      for (const line of block.split('\n')) {
        if (line.startsWith('event: ')) event = line.slice(7);
        else if (line.startsWith('data: ')) data += line.slice(6);
      }
      if (data) onEvent(event, JSON.parse(data));
    }
  }
}

/** Keeps a stream open until aborted, reconnecting after a pause when it ends or fails. */
async function keepOpen(signal: AbortSignal): Promise<void> {
  while (!signal.aborted) {
    try {
      await readStream(signal);
    } catch (err) {
      if (signal.aborted) return;
      set({ error: err instanceof Error ? err.message : String(err) });
    }
    set({ connected: false });
    await new Promise((r) => setTimeout(r, 2000));
  }
}

/** The live state, while the calling view is shown (the stream closes when no view needs it). */
export function useLive(): LiveState {
  const [s, setS] = useState(state);
  useEffect(() => {
    watchers.add(setS);
    if (!stop) {
      stop = new AbortController();
      void keepOpen(stop.signal);
    }
    setS(state);
    return () => {
      watchers.delete(setS);
      if (watchers.size === 0) {
        stop?.abort();
        stop = undefined;
        set({ connected: false });
      }
    };
  }, []);
  return s;
}
