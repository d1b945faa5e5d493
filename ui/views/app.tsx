/** One app: its functions, its triggers, its settings (config, annotations, syslog), each under its own URL. */
import { useState } from 'preact/hooks';
import { api, enc, type App, type Fn, type Page, type Trigger } from '../api.js';
import { ConfirmButton, configChange, Copyable, DangerZone, Empty, ErrorBox, messageOf, parseLines, Tabs, toLines, useLoad, useSubmit } from '../components.js';
import { go, href } from '../router.js';

type Tab = 'functions' | 'triggers' | 'settings';

/** Every item of a list, following its cursors (apps have few fns and triggers; the console shows them all). */
async function all<T>(path: string): Promise<T[]> {
  const out: T[] = [];
  let cursor: string | undefined;
  do {
    const page: Page<T> = await api<Page<T>>(`${path}&per_page=100${cursor ? `&cursor=${enc(cursor)}` : ''}`);
    out.push(...page.items);
    cursor = page.next_cursor;
  } while (cursor && out.length < 1000);
  return out;
}

export function AppView({ id, tab }: { id: string; tab: Tab }) {
  const app = useLoad(() => api<App>(`/v2/apps/${enc(id)}`), [id]);
  const fns = useLoad(() => all<Fn>(`/v2/fns?app_id=${enc(id)}`), [id]);
  if (app.error) return <ErrorBox error={app.error} />;
  const a = app.data;
  return (
    <section aria-labelledby="app-title">
      <p class="crumbs">
        <a href={href('apps')}>Apps</a> /
      </p>
      <h1 id="app-title">{a ? a.name : '…'}</h1>
      <Tabs
        label="App"
        tabs={[
          [href('apps', id), 'Functions', tab === 'functions'],
          [href('apps', id, 'triggers'), 'Triggers', tab === 'triggers'],
          [href('apps', id, 'settings'), 'Settings', tab === 'settings'],
        ]}
      />
      {a && tab === 'functions' ? <Functions app={a} fns={fns.data} error={fns.error} /> : null}
      {a && tab === 'triggers' ? <Triggers app={a} fns={fns.data ?? []} /> : null}
      {a && tab === 'settings' ? <Settings app={a} onSaved={app.reload} /> : null}
    </section>
  );
}

function Functions({ app, fns, error }: { app: App; fns: Fn[] | undefined; error: string | undefined }) {
  const [form, setForm] = useState({ name: '', image: '', memory: '128' });
  const [createError, setCreateError] = useState<string>();
  const create = async (e: Event): Promise<void> => {
    e.preventDefault();
    setCreateError(undefined);
    try {
      const fn = await api<Fn>('/v2/fns', { method: 'POST', body: { app_id: app.id, name: form.name, image: form.image, memory: Number(form.memory) } });
      go(href('fns', fn.id));
    } catch (err) {
      setCreateError(messageOf(err));
    }
  };
  return (
    <>
      <ErrorBox error={error} />
      {fns && fns.length === 0 ? (
        <Empty>
          No functions yet: create one with <code>fn create function {app.name} hello myimage:0.0.1</code> or here.
        </Empty>
      ) : (
        <table aria-label="Functions">
          <thead>
            <tr>
              <th>Name</th>
              <th>Image</th>
              <th>Memory</th>
            </tr>
          </thead>
          <tbody>
            {(fns ?? []).map((f) => (
              <tr key={f.id}>
                <td>
                  <a href={href('fns', f.id)}>{f.name}</a>
                </td>
                <td>
                  <code>{f.image}</code>
                </td>
                <td>{f.memory ?? 128} MB</td>
              </tr>
            ))}
          </tbody>
        </table>
      )}
      <h2>New function</h2>
      <form class="grid-form" onSubmit={(e) => void create(e)}>
        <label>
          Function name <input value={form.name} onInput={(e) => setForm({ ...form, name: e.currentTarget.value })} required autoComplete="off" />
        </label>
        <label>
          Image <input value={form.image} onInput={(e) => setForm({ ...form, image: e.currentTarget.value })} required placeholder="fnproject/hello:0.0.1" autoComplete="off" />
        </label>
        <label>
          Memory (MB) <input type="number" min="1" value={form.memory} onInput={(e) => setForm({ ...form, memory: e.currentTarget.value })} />
        </label>
        <button type="submit">Create function</button>
      </form>
      <ErrorBox error={createError} />
    </>
  );
}

function Triggers({ app, fns }: { app: App; fns: Fn[] }) {
  const triggers = useLoad(() => all<Trigger>(`/v2/triggers?app_id=${enc(app.id)}`), [app.id]);
  const [form, setForm] = useState({ name: '', fn: '', source: '/' });
  const [error, setError] = useState<string>();
  const create = async (e: Event): Promise<void> => {
    e.preventDefault();
    setError(undefined);
    try {
      await api('/v2/triggers', { method: 'POST', body: { app_id: app.id, fn_id: form.fn || fns[0]?.id, name: form.name, type: 'http', source: form.source } });
      setForm({ name: '', fn: form.fn, source: '/' });
      triggers.reload();
    } catch (err) {
      setError(messageOf(err));
    }
  };
  const fnName = (id: string): string => fns.find((f) => f.id === id)?.name ?? id;
  const list = triggers.data ?? [];
  return (
    <>
      <ErrorBox error={triggers.error} />
      {triggers.data && list.length === 0 ? (
        <Empty>
          No triggers yet: create one with <code>fn create trigger {app.name} hello hello --type http --source /hello</code> or here.
        </Empty>
      ) : (
        <ul class="cards" aria-label="Triggers">
          {list.map((t) => (
            <li key={t.id}>
              <h3>{t.name}</h3>
              <p>
                {t.type} trigger on <code>{t.source}</code> for <a href={href('fns', t.fn_id)}>{fnName(t.fn_id)}</a>
              </p>
              <Copyable label={`Endpoint of ${t.name}`} text={String(t.annotations?.['fnproject.io/trigger/httpEndpoint'] ?? `${location.origin}/t/${app.name}${t.source}`)} />
              <ConfirmButton
                label="Delete trigger"
                question={`Delete trigger ${t.name}?`}
                onConfirm={async () => {
                  await api(`/v2/triggers/${enc(t.id)}`, { method: 'DELETE' });
                  triggers.reload();
                }}
              />
            </li>
          ))}
        </ul>
      )}
      <h2>New trigger</h2>
      {fns.length === 0 ? (
        <Empty>A trigger calls a function: create a function first.</Empty>
      ) : (
        <form class="grid-form" onSubmit={(e) => void create(e)}>
          <label>
            Trigger name <input value={form.name} onInput={(e) => setForm({ ...form, name: e.currentTarget.value })} required autoComplete="off" />
          </label>
          <label>
            Function
            <select aria-label="Function" value={form.fn} onChange={(e) => setForm({ ...form, fn: e.currentTarget.value })}>
              {fns.map((f) => (
                <option key={f.id} value={f.id}>
                  {f.name}
                </option>
              ))}
            </select>
          </label>
          <label>
            Source path <input value={form.source} onInput={(e) => setForm({ ...form, source: e.currentTarget.value })} required />
          </label>
          <button type="submit">Create trigger</button>
        </form>
      )}
      <ErrorBox error={error} />
    </>
  );
}

function Settings({ app, onSaved }: { app: App; onSaved: () => void }) {
  const [config, setConfig] = useState(toLines(app.config, '='));
  const [annotations, setAnnotations] = useState(JSON.stringify(app.annotations ?? {}, null, 2));
  const [syslog, setSyslog] = useState(app.syslog_url ?? '');
  const { error, done, submit } = useSubmit(async () => {
    let ann: Record<string, unknown>;
    try {
      ann = JSON.parse(annotations || '{}') as Record<string, unknown>;
    } catch {
      throw new Error('Annotations must be a JSON object');
    }
    await api(`/v2/apps/${enc(app.id)}`, { method: 'PUT', body: { config: configChange(app.config, parseLines(config, '=')), annotations: ann, syslog_url: syslog } });
    onSaved();
  });
  return (
    <>
      <form class="stack-form" onSubmit={submit}>
        <label>
          Config (one KEY=value per line)
          <textarea rows={5} value={config} onInput={(e) => setConfig(e.currentTarget.value)} spellcheck={false} />
        </label>
        <label>
          Annotations (JSON)
          <textarea rows={5} value={annotations} onInput={(e) => setAnnotations(e.currentTarget.value)} spellcheck={false} />
        </label>
        <label>
          Syslog URL <input value={syslog} onInput={(e) => setSyslog(e.currentTarget.value)} placeholder="tcp://logs.example.com:514" />
        </label>
        <button type="submit">Save app</button>
        {done ? <span role="status">Saved</span> : null}
      </form>
      <ErrorBox error={error} />
      <DangerZone what="app" question={`Delete app ${app.name}? Its functions and triggers go too.`} path={`/v2/apps/${enc(app.id)}`} then={() => go(href('apps'))} />
    </>
  );
}
