/** The console's page: the login when the API asks for a token, else the view the URL names. */
import { render } from 'preact';
import { useEffect, useState } from 'preact/hooks';
import { api, needsLogin, onAuthChange, requireLogin, setToken, token, tryToken } from './api.js';
import { ErrorBox } from './components.js';
import { href, useRoute, type Route } from './router.js';
import { AppView } from './views/app.js';
import { Apps } from './views/apps.js';
import { Calls, CallView } from './views/calls.js';
import { Fleet } from './views/fleet.js';
import { FnView } from './views/fn.js';
import { Overview } from './views/overview.js';

function Login() {
  const [value, setValue] = useState('');
  const [error, setError] = useState<string>();
  const submit = async (e: Event): Promise<void> => {
    e.preventDefault();
    setError(undefined);
    const refused = await tryToken(value.trim()).catch((err: unknown) => String(err));
    if (refused) setError(refused);
    else setToken(value.trim());
  };
  return (
    <section class="login" aria-labelledby="login-title">
      <h1 id="login-title">Sign in</h1>
      <p>
        This server asks for an API token. An operator's admin token is in <code>data/admin.token</code>; <code>fnts token create</code> makes others. The token is kept in this tab only.
      </p>
      <form class="stack-form" onSubmit={(e) => void submit(e)}>
        <label>
          API token <input type="password" value={value} onInput={(e) => setValue(e.currentTarget.value)} required autoComplete="off" autoFocus />
        </label>
        <button type="submit">Sign in</button>
      </form>
      <ErrorBox error={error} />
    </section>
  );
}

function View({ route }: { route: Route }) {
  const [a, b, c, d] = route.parts;
  if (a === undefined) return <Overview />;
  if (a === 'apps' && b === undefined) return <Apps />;
  if (a === 'apps' && b !== undefined) return <AppView id={b} tab={c === 'triggers' ? 'triggers' : c === 'settings' ? 'settings' : 'functions'} />;
  if (a === 'fns' && b !== undefined && c === 'calls' && d !== undefined) return <CallView fnId={b} callId={d} />;
  if (a === 'fns' && b !== undefined && c === 'calls') return <Calls fnId={b} query={route.query} />;
  if (a === 'fns' && b !== undefined) return <FnView id={b} tab={c === 'edit' ? 'edit' : 'overview'} />;
  if (a === 'fleet') return <Fleet />;
  return (
    <p>
      No such view. Go to the <a href={href()}>overview</a>.
    </p>
  );
}

function Console() {
  const route = useRoute();
  const [, setTick] = useState(0);
  const [checked, setChecked] = useState(false);
  useEffect(() => {
    const off = onAuthChange(() => setTick((n) => n + 1));
    // Without a token on a server that asks for one, the login comes first; else one read tells whether ours is good.
    fetch('/ui/settings.json')
      .then((res) => res.json() as Promise<{ auth: boolean }>)
      .then(({ auth }) => (auth && !token() ? requireLogin() : api('/v2/apps?per_page=1')))
      .catch(() => undefined)
      .finally(() => setChecked(true));
    return () => void off();
  }, []);
  const login = needsLogin();
  const section = route.parts[0] ?? '';
  return (
    <>
      <a class="skip" href="#main">
        Skip to content
      </a>
      <header class="top">
        <a class="brand" href={href()}>
          fnts console
        </a>
        <nav aria-label="Sections">
          <a href={href()} aria-current={section === '' ? 'page' : undefined}>
            Overview
          </a>
          <a href={href('apps')} aria-current={section === 'apps' || section === 'fns' ? 'page' : undefined}>
            Apps
          </a>
          <a href={href('fleet')} aria-current={section === 'fleet' ? 'page' : undefined}>
            Fleet
          </a>
        </nav>
        {token() ? (
          <button type="button" class="link" onClick={() => setToken(null)}>
            Sign out
          </button>
        ) : null}
      </header>
      <main id="main" tabIndex={-1}>
        {!checked ? <p class="muted">Loading…</p> : login ? <Login /> : <View route={route} />}
      </main>
    </>
  );
}

render(<Console />, document.getElementById('console')!);
