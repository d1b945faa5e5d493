/** One function: its spec, live figures and invoke panel; its edit form; its calls (calls.tsx). */
import { useState } from 'preact/hooks';
import { api, authHeaders, enc, type App, type CallRecord, type Fn, type Page } from '../api.js';
import { Chart, configChange, Copyable, DangerZone, ErrorBox, Figure, messageOf, num, parseLines, Tabs, toLines, useLoad, useSubmit } from '../components.js';
import { useLive, type Containers } from '../live.js';
import { go, href } from '../router.js';

export function FnView({ id, tab }: { id: string; tab: 'overview' | 'edit' }) {
  const fn = useLoad(() => api<Fn>(`/v2/fns/${enc(id)}`), [id]);
  const app = useLoad(() => (fn.data ? api<App>(`/v2/apps/${enc(fn.data.app_id)}`) : Promise.resolve(undefined)), [fn.data?.app_id]);
  if (fn.error) return <ErrorBox error={fn.error} />;
  const f = fn.data;
  return (
    <section aria-labelledby="fn-title">
      <p class="crumbs">
        <a href={href('apps')}>Apps</a> / {app.data ? <a href={href('apps', app.data.id)}>{app.data.name}</a> : '…'} /
      </p>
      <h1 id="fn-title">{f ? f.name : '…'}</h1>
      <FnTabs id={id} tab={tab} />
      {f && tab === 'overview' ? <FnOverview fn={f} app={app.data} /> : null}
      {f && tab === 'edit' ? <FnEdit fn={f} onSaved={fn.reload} /> : null}
    </section>
  );
}

export function FnTabs({ id, tab }: { id: string; tab: 'overview' | 'edit' | 'calls' }) {
  return (
    <Tabs
      label="Function"
      tabs={[
        [href('fns', id), 'Overview', tab === 'overview'],
        [href('fns', id, 'calls'), 'Calls', tab === 'calls'],
        [href('fns', id, 'edit'), 'Edit', tab === 'edit'],
      ]}
    />
  );
}

/** "1 busy, 2 paused": the states that have containers; "none" when none has. */
function containersText(c: Containers): string {
  const parts = Object.entries(c)
    .filter(([, n]) => n > 0)
    .map(([state, n]) => `${n} ${state}`);
  return parts.length ? parts.join(', ') : 'none';
}

function FnOverview({ fn, app }: { fn: Fn; app: App | undefined }) {
  const live = useLive();
  const figures = live.figures?.fns.find((x) => x.fn_id === fn.id);
  const points = live.fnHistory.get(fn.id) ?? [];
  const runs = live.summary?.runs_calls !== false;
  const idle = runs ? 'no calls in the last interval' : 'this node runs no calls';
  return (
    <>
      <div class="columns">
        <div>
          <h2>Spec</h2>
          <dl class="spec">
            <dt>Image</dt>
            <dd>
              <code>{fn.image}</code>
            </dd>
            <dt>Memory</dt>
            <dd>{fn.memory ?? 128} MB</dd>
            <dt>Timeout</dt>
            <dd>{fn.timeout ?? 30} s</dd>
            <dt>Idle timeout</dt>
            <dd>{fn.idle_timeout ?? 30} s</dd>
            <dt>Format</dt>
            <dd>{fn.format ?? 'http-stream'}</dd>
            <dt>Config</dt>
            <dd>{Object.keys(fn.config ?? {}).length ? <pre>{toLines(fn.config, '=')}</pre> : <span class="muted">none</span>}</dd>
            <dt>ID</dt>
            <dd>
              <code>{fn.id}</code>
            </dd>
          </dl>
        </div>
        <div>
          <h2>Live</h2>
          <div class="figures small">
            <Figure label="Function calls per second" value={figures ? num(figures.calls_per_s) : runs ? '0.0' : null} hint={runs ? undefined : idle} />
            <Figure label="Function errors per second" value={figures ? num(figures.errors_per_s) : runs ? '0.0' : null} hint={runs ? undefined : idle} />
            <Figure label="Function latency p95" value={num(figures?.latency_ms?.p95)} unit="ms" hint={idle} />
            <Figure label="Function containers" value={figures ? containersText(figures.containers) : runs ? 'none' : null} hint={runs ? undefined : idle} />
          </div>
          <Chart label="Calls per second" points={points} pick={(p) => p.calls_per_s} />
        </div>
      </div>
      <Invoke fn={fn} app={app} />
    </>
  );
}

interface InvokeResult {
  status: number;
  headers: [string, string][];
  callId: string | null;
  ms: number;
  body: string;
  detached: boolean;
  cold?: boolean | undefined;
}

/**
 * Was the call cold? Its record says whether it started a container
 * (start_ms). Records are stored a moment after the answer: the fn's newest
 * calls are read until it is there (a list, which never answers 404 for a
 * record not stored yet).
 */
async function coldOf(fnId: string, callId: string): Promise<boolean | undefined> {
  for (let i = 0; i < 10; i++) {
    const page = await api<Page<CallRecord>>(`/v2/fns/${enc(fnId)}/calls?per_page=10`).catch(() => undefined);
    const r = page?.items.find((c) => c.id === callId);
    if (r && r.status !== 'running' && r.status !== 'queued') return r.timings?.start_ms !== undefined;
    await new Promise((res) => setTimeout(res, 300));
  }
  return undefined;
}

/** The annotation by which an app or fn asks callers for a token. */
const INVOKE_AUTH = 'fnts.io/invoke-auth';

const shellQuote = (s: string): string => `'${s.replace(/'/g, `'\\''`)}'`;

function Invoke({ fn, app }: { fn: Fn; app: App | undefined }) {
  const [body, setBody] = useState('{"name":"console"}');
  const [contentType, setContentType] = useState('application/json');
  const [headers, setHeaders] = useState('');
  const [detached, setDetached] = useState(false);
  const [result, setResult] = useState<InvokeResult>();
  const [error, setError] = useState<string>();
  const [busy, setBusy] = useState(false);
  const url = String(fn.annotations?.['fnproject.io/fn/invokeEndpoint'] ?? `${location.origin}/invoke/${fn.id}`);
  const asksToken = fn.annotations?.[INVOKE_AUTH] === 'token' || app?.annotations?.[INVOKE_AUTH] === 'token';
  const extra = parseLines(headers, ':');
  const curl = [
    'curl -si -X POST',
    `-H ${shellQuote(`Content-Type: ${contentType}`)}`,
    ...(detached ? [`-H 'Fn-Invoke-Type: detached'`] : []),
    ...(asksToken ? [`-H "Authorization: Bearer $FN_TOKEN"`] : []),
    ...Object.entries(extra).map(([k, v]) => `-H ${shellQuote(`${k}: ${v}`)}`),
    `-d ${shellQuote(body)}`,
    url,
  ].join(' ');
  const fnCli = `echo -n ${shellQuote(body)} | fn invoke ${app?.name ?? '<app>'} ${fn.name} --content-type ${shellQuote(contentType)}`;
  const run = async (e: Event): Promise<void> => {
    e.preventDefault();
    setBusy(true);
    setError(undefined);
    setResult(undefined);
    const t0 = performance.now();
    try {
      const res = await fetch(`/invoke/${enc(fn.id)}`, {
        method: 'POST',
        // The console's token goes only to a fn that asks for one (fnts.io/invoke-auth: the server takes it off before the function sees it); any other fn would receive it.
        headers: { ...(asksToken ? authHeaders() : {}), ...extra, 'Content-Type': contentType, ...(detached ? { 'Fn-Invoke-Type': 'detached' } : {}) },
        body,
        credentials: 'omit',
      });
      const text = await res.text();
      const ms = performance.now() - t0;
      const callId = res.headers.get('Fn-Call-Id');
      const r: InvokeResult = { status: res.status, headers: [...res.headers.entries()], callId, ms, body: text, detached };
      setResult(r);
      if (callId && !detached) setResult({ ...r, cold: await coldOf(fn.id, callId) });
    } catch (err) {
      setError(messageOf(err));
    } finally {
      setBusy(false);
    }
  };
  return (
    <>
      <h2 id="invoke-title">Invoke</h2>
      <form class="stack-form" aria-labelledby="invoke-title" onSubmit={(e) => void run(e)}>
        <label>
          Request body
          <textarea rows={4} value={body} onInput={(e) => setBody(e.currentTarget.value)} spellcheck={false} />
        </label>
        <div class="row">
          <label>
            Content type <input value={contentType} onInput={(e) => setContentType(e.currentTarget.value)} />
          </label>
          <fieldset>
            <legend>Invocation</legend>
            <label>
              <input type="radio" name="mode" checked={!detached} onChange={() => setDetached(false)} /> Sync
            </label>
            <label>
              <input type="radio" name="mode" checked={detached} onChange={() => setDetached(true)} /> Detached
            </label>
          </fieldset>
        </div>
        <label>
          Headers (one Name: value per line)
          <textarea rows={2} value={headers} onInput={(e) => setHeaders(e.currentTarget.value)} spellcheck={false} />
        </label>
        <button type="submit" disabled={busy}>
          {busy ? 'Invoking…' : 'Invoke'}
        </button>
      </form>
      <ErrorBox error={error} />
      {result ? (
        <div class="result" aria-label="Invoke result" role="region">
          <dl class="spec">
            <dt>Status</dt>
            <dd>
              <output aria-label="Status">{result.status}</output>
            </dd>
            <dt>Fn-Call-Id</dt>
            <dd>
              {result.callId ? (
                <a href={href('fns', fn.id, 'calls', result.callId)} aria-label="Call id">
                  {result.callId}
                </a>
              ) : (
                '—'
              )}
            </dd>
            <dt>Latency</dt>
            <dd>{result.ms.toFixed(1)} ms</dd>
            <dt>Start</dt>
            <dd>{result.detached ? 'detached: runs in the background' : result.cold === undefined ? '…' : result.cold ? 'cold (started a container)' : 'warm (a running container)'}</dd>
            <dt>Headers</dt>
            <dd>
              <pre>{result.headers.map(([k, v]) => `${k}: ${v}`).join('\n')}</pre>
            </dd>
          </dl>
          <h3>Answer</h3>
          <pre class="answer" aria-label="Answer">
            {result.body || <span class="muted">(empty)</span>}
          </pre>
        </div>
      ) : null}
      <Copyable label="fn invoke command" text={fnCli} />
      <Copyable label="curl command" text={curl} />
    </>
  );
}

function FnEdit({ fn, onSaved }: { fn: Fn; onSaved: () => void }) {
  const [form, setForm] = useState({
    image: fn.image,
    memory: String(fn.memory ?? 128),
    timeout: String(fn.timeout ?? 30),
    idle: String(fn.idle_timeout ?? 30),
    format: fn.format ?? 'http-stream',
    config: toLines(fn.config, '='),
  });
  const { error, done, submit } = useSubmit(async () => {
    await api(`/v2/fns/${enc(fn.id)}`, {
      method: 'PUT',
      body: {
        image: form.image,
        memory: Number(form.memory),
        timeout: Number(form.timeout),
        idle_timeout: Number(form.idle),
        format: form.format,
        config: configChange(fn.config, parseLines(form.config, '=')),
      },
    });
    onSaved();
  });
  const field = (k: keyof typeof form) => (e: { currentTarget: { value: string } }) => setForm({ ...form, [k]: e.currentTarget.value });
  return (
    <>
      <form class="stack-form" onSubmit={submit}>
        <label>
          Image <input value={form.image} onInput={field('image')} required />
        </label>
        <div class="row">
          <label>
            Memory (MB) <input type="number" value={form.memory} onInput={field('memory')} />
          </label>
          <label>
            Timeout (s) <input type="number" value={form.timeout} onInput={field('timeout')} />
          </label>
          <label>
            Idle timeout (s) <input type="number" value={form.idle} onInput={field('idle')} />
          </label>
          <label>
            Format
            <select aria-label="Format" value={form.format} onChange={field('format')}>
              {['http-stream', 'http', 'json', 'cloudevent', 'default'].map((f) => (
                <option key={f}>{f}</option>
              ))}
            </select>
          </label>
        </div>
        <label>
          Config (one KEY=value per line)
          <textarea rows={4} value={form.config} onInput={field('config')} spellcheck={false} />
        </label>
        <button type="submit">Save function</button>
        {done ? <span role="status">Saved</span> : null}
      </form>
      <ErrorBox error={error} />
      <DangerZone what="function" question={`Delete function ${fn.name}? Its triggers go too.`} path={`/v2/fns/${enc(fn.id)}`} then={() => go(href('apps', fn.app_id))} />
    </>
  );
}
