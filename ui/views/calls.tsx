/**
 * A function's calls, newest first, paged with the API's cursors and
 * filtered by time (the API's from_time) and status (read through the API's pages);
 * one click on a call opens its record and its log. A dead detached call
 * shows its attempts and can be run again (the redrive endpoint).
 */
import { useState } from 'preact/hooks';
import { api, enc, type CallRecord, type Fn, type Page } from '../api.js';
import { Empty, ErrorBox, messageOf, useLoad, when } from '../components.js';
import { go, href } from '../router.js';
import { Pager } from './apps.js';
import { FnTabs } from './fn.js';

const SINCE: ReadonlyArray<[string, string]> = [
  ['', 'Any time'],
  ['900', 'Last 15 minutes'],
  ['3600', 'Last hour'],
  ['86400', 'Last 24 hours'],
];
const STATUSES = ['', 'success', 'error', 'timeout', 'cancelled', 'queued', 'running'];

function FnHeader({ fnId, tab }: { fnId: string; tab: 'calls' }) {
  const fn = useLoad(() => api<Fn>(`/v2/fns/${enc(fnId)}`), [fnId]);
  return (
    <>
      <p class="crumbs">
        <a href={href('apps')}>Apps</a> / {fn.data ? <a href={href('apps', fn.data.app_id)}>app</a> : '…'} / {fn.data ? <a href={href('fns', fnId)}>{fn.data.name}</a> : '…'} /
      </p>
      <h1 id="calls-title">Calls{fn.data ? ` of ${fn.data.name}` : ''}</h1>
      <FnTabs id={fnId} tab={tab} />
      <ErrorBox error={fn.error} />
    </>
  );
}

const PAGE = 30;
/** How many of the API's pages one page of a status filter reads at most. */
const MAX_SCAN = 10;

/**
 * A page of calls, newest first. The API filters by time, not by status: a
 * status filter reads the API's pages (100 calls each) from `cursor` until
 * PAGE calls match or MAX_SCAN pages were read, and the next page goes on
 * from where that stopped.
 */
async function callsPage(fnId: string, from: string, cursor: string | undefined, status: string): Promise<Page<CallRecord>> {
  const get = (per: number, at: string | undefined): Promise<Page<CallRecord>> => api<Page<CallRecord>>(`/v2/fns/${enc(fnId)}/calls?per_page=${per}${from}${at ? `&cursor=${enc(at)}` : ''}`);
  if (!status) return get(PAGE, cursor);
  const items: CallRecord[] = [];
  let at = cursor;
  for (let read = 0; read < MAX_SCAN && items.length < PAGE; read++) {
    const page = await get(100, at);
    items.push(...page.items.filter((c) => c.status === status));
    at = page.next_cursor;
    if (!at) break;
  }
  return { items, ...(at ? { next_cursor: at } : {}) };
}

const duration = (c: CallRecord): string => {
  if (!c.started_at || !c.completed_at) return '—';
  return `${(Date.parse(c.completed_at) - Date.parse(c.started_at)).toFixed(0)} ms`;
};

export function Calls({ fnId, query }: { fnId: string; query: URLSearchParams }) {
  const status = query.get('status') ?? '';
  const since = query.get('since') ?? '';
  const [cursors, setCursors] = useState<string[]>([]);
  const cursor = cursors[cursors.length - 1];
  const page = useLoad(() => {
    const from = since ? `&from_time=${Math.floor(Date.now() / 1000) - Number(since)}` : '';
    return callsPage(fnId, from, cursor, status);
  }, [fnId, since, cursor, status]);
  const filter = (next: { status?: string; since?: string }): void => {
    const q = new URLSearchParams({ status, since, ...next });
    for (const [k, v] of [...q.entries()]) if (!v) q.delete(k);
    setCursors([]);
    go(`${href('fns', fnId, 'calls')}${q.size ? `?${q}` : ''}`);
  };
  const items = page.data?.items ?? [];
  return (
    <section aria-labelledby="calls-title">
      <FnHeader fnId={fnId} tab="calls" />
      <form class="inline-form" onSubmit={(e) => e.preventDefault()}>
        <label>
          Status
          <select aria-label="Status" value={status} onChange={(e) => filter({ status: e.currentTarget.value })}>
            {STATUSES.map((s) => (
              <option key={s} value={s}>
                {s || 'Any status'}
              </option>
            ))}
          </select>
        </label>
        <label>
          Since
          <select aria-label="Since" value={since} onChange={(e) => filter({ since: e.currentTarget.value })}>
            {SINCE.map(([v, label]) => (
              <option key={v} value={v}>
                {label}
              </option>
            ))}
          </select>
        </label>
        <button type="button" onClick={page.reload}>
          Refresh
        </button>
      </form>
      <ErrorBox error={page.error} />
      {page.data && items.length === 0 ? (
        <Empty>
          No calls {status || since ? 'match these filters' : 'yet'}: invoke the function from its <a href={href('fns', fnId)}>overview</a>, or with <code>fn invoke</code>.
        </Empty>
      ) : (
        <table aria-label="Calls">
          <thead>
            <tr>
              <th>Call</th>
              <th>Status</th>
              <th>Created</th>
              <th>Duration</th>
              <th>Attempts</th>
            </tr>
          </thead>
          <tbody>
            {items.map((c) => (
              <tr key={c.id}>
                <td>
                  <a href={href('fns', fnId, 'calls', c.id)}>{c.id}</a>
                </td>
                <td>
                  <span class={`status status-${c.status}`}>{c.status}</span>
                </td>
                <td>{when(c.created_at)}</td>
                <td>{duration(c)}</td>
                <td>{c.attempts ?? '—'}</td>
              </tr>
            ))}
          </tbody>
        </table>
      )}
      <Pager cursors={cursors} setCursors={setCursors} next={page.data?.next_cursor} />
    </section>
  );
}

export function CallView({ fnId, callId }: { fnId: string; callId: string }) {
  const record = useLoad(() => api<CallRecord>(`/v2/fns/${enc(fnId)}/calls/${enc(callId)}`), [fnId, callId]);
  const log = useLoad(() => api<string>(`/v2/fns/${enc(fnId)}/calls/${enc(callId)}/log`, { accept: 'text/plain' }), [fnId, callId]);
  const [retry, setRetry] = useState<{ error?: string; done?: boolean }>({});
  const r = record.data;
  const dead = r !== undefined && r.attempts !== undefined && (r.status === 'error' || r.status === 'timeout');
  const again = async (): Promise<void> => {
    setRetry({});
    try {
      await api(`/v2/fns/${enc(fnId)}/calls/${enc(callId)}/retry`, { method: 'POST' });
      setRetry({ done: true });
      record.reload();
    } catch (err) {
      setRetry({ error: messageOf(err) });
    }
  };
  return (
    <section aria-labelledby="call-title">
      <p class="crumbs">
        <a href={href('fns', fnId)}>Function</a> / <a href={href('fns', fnId, 'calls')}>Calls</a> /
      </p>
      <h1 id="call-title">Call {callId}</h1>
      <ErrorBox error={record.error} />
      {r ? (
        <dl class="spec">
          <dt>Status</dt>
          <dd>
            <span class={`status status-${r.status}`} aria-label="Call status">
              {r.status}
            </span>
          </dd>
          {r.error ? (
            <>
              <dt>Error</dt>
              <dd>{r.error}</dd>
            </>
          ) : null}
          <dt>Path</dt>
          <dd>
            <code>{r.path}</code>
          </dd>
          <dt>Created</dt>
          <dd>{when(r.created_at)}</dd>
          <dt>Started</dt>
          <dd>{when(r.started_at)}</dd>
          <dt>Completed</dt>
          <dd>{when(r.completed_at)}</dd>
          <dt>Timings</dt>
          <dd>
            {r.timings ? `waited ${r.timings.wait_ms} ms, ran ${r.timings.exec_ms} ms${r.timings.start_ms !== undefined ? `, started its container in ${r.timings.start_ms} ms (cold)` : ''}` : '—'}
          </dd>
          {r.attempts !== undefined ? (
            <>
              <dt>Attempts</dt>
              <dd>
                <output aria-label="Attempts">{r.attempts}</output>
              </dd>
            </>
          ) : null}
        </dl>
      ) : null}
      {dead ? (
        <div class="row">
          <button type="button" onClick={() => void again()}>
            Retry
          </button>
          <span class="muted">This detached call is dead (it failed its last attempt): Retry queues it to run again.</span>
        </div>
      ) : null}
      {retry.done ? <p role="status">Queued to run again.</p> : null}
      <ErrorBox error={retry.error} />
      <h2 id="log-title">Log</h2>
      {log.error ? (
        <p class="muted">{log.error}</p>
      ) : (
        <pre class="log" aria-labelledby="log-title" tabIndex={0}>
          {log.data === undefined ? '…' : log.data || '(the call wrote nothing)'}
        </pre>
      )}
      <button type="button" onClick={log.reload}>
        Reload log
      </button>
    </section>
  );
}
