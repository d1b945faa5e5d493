/** The apps: a list with Fn's paging, and a form to create one. */
import { useState } from 'preact/hooks';
import { api, enc, type App, type Page } from '../api.js';
import { Empty, ErrorBox, messageOf, useLoad, when } from '../components.js';
import { go, href } from '../router.js';

export function Apps() {
  const [cursors, setCursors] = useState<string[]>([]);
  const cursor = cursors[cursors.length - 1];
  const page = useLoad(() => api<Page<App>>(`/v2/apps?per_page=50${cursor ? `&cursor=${enc(cursor)}` : ''}`), [cursor]);
  const [name, setName] = useState('');
  const [error, setError] = useState<string>();
  const create = async (e: Event): Promise<void> => {
    e.preventDefault();
    setError(undefined);
    try {
      const app = await api<App>('/v2/apps', { method: 'POST', body: { name } });
      go(href('apps', app.id));
    } catch (err) {
      setError(messageOf(err));
    }
  };
  const items = page.data?.items ?? [];
  return (
    <section aria-labelledby="apps-title">
      <h1 id="apps-title">Apps</h1>
      <form class="inline-form" onSubmit={(e) => void create(e)}>
        <label>
          App name <input name="name" value={name} onInput={(e) => setName(e.currentTarget.value)} required autoComplete="off" />
        </label>
        <button type="submit">Create app</button>
      </form>
      <ErrorBox error={error} />
      <ErrorBox error={page.error} />
      {page.data && items.length === 0 && !cursor ? (
        <Empty>
          No apps yet: create one with <code>fn create app myapp</code> or with the form above.
        </Empty>
      ) : (
        <table aria-label="Apps">
          <thead>
            <tr>
              <th>Name</th>
              <th>ID</th>
              <th>Created</th>
            </tr>
          </thead>
          <tbody>
            {items.map((a) => (
              <tr key={a.id}>
                <td>
                  <a href={href('apps', a.id)}>{a.name}</a>
                </td>
                <td>
                  <code>{a.id}</code>
                </td>
                <td>{when(a.created_at)}</td>
              </tr>
            ))}
          </tbody>
        </table>
      )}
      <Pager cursors={cursors} setCursors={setCursors} next={page.data?.next_cursor} />
    </section>
  );
}

/** Newer/older through the API's cursors (a stack of the cursors that led here). */
export function Pager({ cursors, setCursors, next }: { cursors: string[]; setCursors: (c: string[]) => void; next: string | undefined }) {
  if (cursors.length === 0 && !next) return null;
  return (
    <nav class="pager" aria-label="Pages">
      <button type="button" disabled={cursors.length === 0} onClick={() => setCursors(cursors.slice(0, -1))}>
        Previous page
      </button>
      <button type="button" disabled={!next} onClick={() => next && setCursors([...cursors, next])}>
        Next page
      </button>
    </nav>
  );
}
