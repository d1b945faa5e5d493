/** Pieces every view uses: loading data, errors in Fn's words, figures that never jump, charts, copying. */
import type { ComponentChildren } from 'preact';
import { useCallback, useEffect, useState } from 'preact/hooks';
import { api, ApiFailure } from './api.js';
import type { Point } from './live.js';

export interface Loaded<T> {
  readonly data: T | undefined;
  readonly error: string | undefined;
  readonly loading: boolean;
  reload(): void;
}

/** Runs `load` now and whenever `deps` change; `reload()` runs it again. */
export function useLoad<T>(load: () => Promise<T>, deps: readonly unknown[]): Loaded<T> {
  const [state, setState] = useState<{ data: T | undefined; error: string | undefined; loading: boolean }>({ data: undefined, error: undefined, loading: true });
  const [n, setN] = useState(0);
  useEffect(() => {
    let live = true;
    setState((s) => ({ ...s, loading: true }));
    load().then(
      (data) => live && setState({ data, error: undefined, loading: false }),
      (err: unknown) => live && setState({ data: undefined, error: messageOf(err), loading: false }),
    );
    return () => {
      live = false;
    };
  }, [...deps, n]);
  const reload = useCallback(() => setN((x) => x + 1), []);
  return { ...state, reload };
}

export function messageOf(err: unknown): string {
  if (err instanceof ApiFailure) return err.message;
  return err instanceof Error ? err.message : String(err);
}

/** An error from the API, in its words. */
export function ErrorBox({ error }: { error: string | undefined }) {
  if (!error) return null;
  return (
    <p class="error" role="alert">
      {error}
    </p>
  );
}

/** What to do when a list is empty. */
export function Empty({ children }: { children: ComponentChildren }) {
  return <div class="empty">{children}</div>;
}

/** One live figure: a fixed box, so a changing number never moves the page; "unknown" where the node cannot know. */
export function Figure({ label, value, unit, hint }: { label: string; value: string | null; unit?: string; hint?: string }) {
  return (
    <div class="figure">
      <span class="figure-label">{label}</span>
      <output class="figure-value" aria-label={label} title={hint}>
        <span class="figure-number">{value ?? '—'}</span>
        {value !== null && unit ? <small>{unit}</small> : null}
      </output>
      {value === null && hint ? <span class="figure-hint">{hint}</span> : null}
    </div>
  );
}

export const num = (n: number | null | undefined, digits = 1): string | null => (n === null || n === undefined ? null : n.toFixed(digits));

export function bytes(n: number): string {
  const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
  let i = 0;
  while (n >= 1024 && i < units.length - 1) {
    n /= 1024;
    i++;
  }
  return `${n.toFixed(i === 0 ? 0 : 1)} ${units[i]}`;
}

const W = 300;
const H = 60;

/** A small time series over the last 15 minutes; gaps where nothing was measured. */
export function Chart({ label, points, pick, unit }: { label: string; points: readonly Point[]; pick: (p: Point) => number | null; unit?: string }) {
  const now = Date.now();
  const from = now - 15 * 60_000;
  const values = points.map(pick);
  const max = Math.max(1e-9, ...values.map((v) => v ?? 0));
  const lines: string[] = [];
  let line: string[] = [];
  points.forEach((p, i) => {
    const v = values[i];
    const prev = points[i - 1];
    if (v === null || v === undefined || (prev && p.at - prev.at > 10_000)) {
      if (line.length) lines.push(line.join(' '));
      line = [];
      if (v === null || v === undefined) return;
    }
    const x = ((p.at - from) / (now - from)) * W;
    const y = H - 2 - (v / max) * (H - 4);
    line.push(`${x.toFixed(1)},${y.toFixed(1)}`);
  });
  if (line.length) lines.push(line.join(' '));
  const last = [...values].reverse().find((v) => v !== null && v !== undefined);
  return (
    <figure class="chart">
      <figcaption>
        {label}
        <span class="chart-max">
          {last !== undefined && last !== null ? `${last.toFixed(1)}${unit ?? ''} now, ` : ''}max {max < 1e-6 ? 0 : max.toFixed(1)}
          {unit ?? ''}
        </span>
      </figcaption>
      <svg viewBox={`0 0 ${W} ${H}`} preserveAspectRatio="none" role="img" aria-label={`${label}, last 15 minutes`}>
        <line x1="0" y1={H - 1} x2={W} y2={H - 1} class="axis" />
        {lines.map((pts, i) => (
          <polyline key={i} points={pts} />
        ))}
      </svg>
    </figure>
  );
}

/** A command or URL to copy, with a button that copies it. */
export function Copyable({ label, text }: { label: string; text: string }) {
  const [copied, setCopied] = useState(false);
  const copy = (): void => {
    void navigator.clipboard?.writeText(text).then(
      () => {
        setCopied(true);
        setTimeout(() => setCopied(false), 1500);
      },
      () => undefined,
    );
  };
  return (
    <div class="copyable">
      <span class="copyable-label">{label}</span>
      <code aria-label={label}>{text}</code>
      <button type="button" onClick={copy} aria-label={`Copy ${label}`}>
        {copied ? 'Copied' : 'Copy'}
      </button>
    </div>
  );
}

/** A button that asks first, in place: "Delete app x?" with Delete and Cancel. */
export function ConfirmButton({ label, question, onConfirm }: { label: string; question: string; onConfirm: () => Promise<void> }) {
  const [asking, setAsking] = useState(false);
  const [error, setError] = useState<string>();
  if (!asking)
    return (
      <button type="button" class="danger" onClick={() => setAsking(true)}>
        {label}
      </button>
    );
  return (
    <div class="confirm" role="group" aria-label={question}>
      <span>{question}</span>
      <button
        type="button"
        class="danger"
        onClick={() => {
          setError(undefined);
          onConfirm().catch((err: unknown) => setError(messageOf(err)));
        }}
      >
        Yes, {label.toLowerCase()}
      </button>
      <button type="button" onClick={() => setAsking(false)}>
        Cancel
      </button>
      <ErrorBox error={error} />
    </div>
  );
}

/** `KEY=value` lines to a map, and back. */
export function parseLines(text: string, sep: '=' | ':'): Record<string, string> {
  const out: Record<string, string> = {};
  for (const line of text.split('\n')) {
    const at = line.indexOf(sep);
    if (!line.trim()) continue;
    if (at <= 0) out[line.trim()] = '';
    else out[line.slice(0, at).trim()] = line.slice(at + 1).trim();
  }
  return out;
}

export function toLines(map: Record<string, string> | undefined, sep: '=' | ':'): string {
  return Object.entries(map ?? {})
    .map(([k, v]) => `${k}${sep}${sep === ':' ? ' ' : ''}${v}`)
    .join('\n');
}

/** A config edit as the API takes it: keys removed are sent as "" (which deletes them). */
export function configChange(before: Record<string, string> | undefined, after: Record<string, string>): Record<string, string> {
  const change: Record<string, string> = { ...after };
  for (const k of Object.keys(before ?? {})) if (!(k in after)) change[k] = '';
  return change;
}

export function when(iso: string | undefined): string {
  if (!iso) return '—';
  const d = new Date(iso);
  return Number.isNaN(d.getTime()) ? iso : d.toLocaleString();
}

/** A row of links between a thing's views, the current one marked for screen readers and eyes alike. */
export function Tabs({ label, tabs }: { label: string; tabs: ReadonlyArray<readonly [to: string, name: string, current: boolean]> }) {
  return (
    <nav class="tabs" aria-label={label}>
      {tabs.map(([to, name, current]) => (
        <a key={to} href={to} aria-current={current ? 'page' : undefined}>
          {name}
        </a>
      ))}
    </nav>
  );
}

/** A form's submit: runs `action`, then says it is done, or shows what the API answered. */
export function useSubmit(action: () => Promise<void>): { error: string | undefined; done: boolean; submit: (e: Event) => void } {
  const [state, setState] = useState<{ error?: string; done: boolean }>({ done: false });
  const submit = (e: Event): void => {
    e.preventDefault();
    setState({ done: false });
    action().then(
      () => setState({ done: true }),
      (err: unknown) => setState({ error: messageOf(err), done: false }),
    );
  };
  return { error: state.error, done: state.done, submit };
}

/** Deleting a thing, after asking, then going where it leads. */
export function DangerZone({ what, question, path, then }: { what: string; question: string; path: string; then: () => void }) {
  return (
    <>
      <h2>Danger zone</h2>
      <ConfirmButton
        label={`Delete ${what}`}
        question={question}
        onConfirm={async () => {
          await api(path, { method: 'DELETE' });
          then();
        }}
      />
    </>
  );
}
