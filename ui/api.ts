/**
 * The console's only way to the server: the public API, as a script uses it
 * (`Authorization: Bearer <token>` on /v2, Fn's `{"message"}` on errors).
 * The token lives in this tab's sessionStorage only: it is sent to this
 * origin and nowhere else, and is gone when the tab closes.
 */
const TOKEN_KEY = 'fnts.console.token';

export function token(): string | null {
  return sessionStorage.getItem(TOKEN_KEY);
}

/** Keeps a token the server accepted; null forgets it (signing out: the page starts again without it). */
export function setToken(value: string | null): void {
  if (value === null) {
    sessionStorage.removeItem(TOKEN_KEY);
    location.reload();
    return;
  }
  sessionStorage.setItem(TOKEN_KEY, value);
  refused = false;
  for (const l of authListeners) l();
}

/** Told when the server refuses the token (401): the app shows the login. */
const authListeners = new Set<() => void>();
let refused = false;

export function onAuthChange(listener: () => void): () => void {
  authListeners.add(listener);
  return () => authListeners.delete(listener);
}

/** The server asks for a token and this tab has none: show the login. */
export function requireLogin(): void {
  refused = true;
  for (const l of authListeners) l();
}

/** Whether the server refused the current token (or its absence) since it was set. */
export function needsLogin(): boolean {
  return refused;
}

/** An error as the API said it: its HTTP status and Fn's message. */
export class ApiFailure extends Error {
  constructor(
    readonly status: number,
    message: string,
  ) {
    super(message);
  }
}

export function authHeaders(): Record<string, string> {
  const t = token();
  return t ? { Authorization: `Bearer ${t}` } : {};
}

/** Fn's message from an error answer, else the status line. */
async function messageOf(res: Response): Promise<string> {
  const text = await res.text();
  try {
    const body = JSON.parse(text) as { message?: unknown; error?: { message?: unknown } };
    const m = body.message ?? body.error?.message;
    if (typeof m === 'string' && m !== '') return m;
  } catch {
    // not JSON: the text itself
  }
  return text.trim() || `${res.status} ${res.statusText}`;
}

export async function api<T>(path: string, init: { method?: string; body?: unknown; accept?: string } = {}): Promise<T> {
  const headers: Record<string, string> = { ...authHeaders(), Accept: init.accept ?? 'application/json' };
  if (init.body !== undefined) headers['Content-Type'] = 'application/json';
  const res = await fetch(path, {
    method: init.method ?? 'GET',
    headers,
    ...(init.body !== undefined ? { body: JSON.stringify(init.body) } : {}),
    credentials: 'omit',
  });
  if (res.status === 401) {
    refused = true;
    for (const l of authListeners) l();
  }
  if (!res.ok) throw new ApiFailure(res.status, await messageOf(res));
  refused = false;
  if (res.status === 204) return undefined as T;
  if ((init.accept ?? 'application/json') !== 'application/json') return (await res.text()) as T;
  return (await res.json()) as T;
}

/** Checks a token before keeping it: the server's answer to a read of the apps. */
export async function tryToken(candidate: string): Promise<string | undefined> {
  const res = await fetch('/v2/apps?per_page=1', { headers: { Authorization: `Bearer ${candidate}` }, credentials: 'omit' });
  if (res.ok) return undefined;
  return messageOf(res);
}

export interface Page<T> {
  readonly items: T[];
  readonly next_cursor?: string;
}

export interface App {
  readonly id: string;
  readonly name: string;
  readonly config?: Record<string, string>;
  readonly annotations?: Record<string, unknown>;
  readonly syslog_url?: string;
  readonly created_at: string;
  readonly updated_at: string;
}

export interface Fn {
  readonly id: string;
  readonly app_id: string;
  readonly name: string;
  readonly image: string;
  readonly memory?: number;
  readonly timeout?: number;
  readonly idle_timeout?: number;
  readonly format?: string;
  readonly config?: Record<string, string>;
  readonly annotations?: Record<string, unknown>;
  readonly created_at: string;
  readonly updated_at: string;
}

export interface Trigger {
  readonly id: string;
  readonly app_id: string;
  readonly fn_id: string;
  readonly name: string;
  readonly type: string;
  readonly source: string;
  readonly annotations?: Record<string, unknown>;
}

export interface CallRecord {
  readonly id: string;
  readonly status: string;
  readonly error?: string;
  readonly app_id: string;
  readonly fn_id: string;
  readonly path: string;
  readonly created_at: string;
  readonly started_at?: string;
  readonly completed_at?: string;
  readonly timings?: { wait_ms: number; exec_ms: number; image_ms?: number; create_ms?: number; start_ms?: number };
  readonly attempts?: number;
}

export const enc = encodeURIComponent;
