/**
 * Hash routing: every view has a URL (`#/apps/<id>/triggers`), so links can
 * be shared and the back button works; the server serves one page for all.
 */
import { useEffect, useState } from 'preact/hooks';

export interface Route {
  /** The path's segments: `#/fns/x/calls` is ['fns', 'x', 'calls']. */
  readonly parts: readonly string[];
  readonly query: URLSearchParams;
}

function current(): Route {
  const raw = location.hash.replace(/^#/, '') || '/';
  const [path = '/', query = ''] = raw.split('?', 2);
  return { parts: path.split('/').filter(Boolean).map(decodeURIComponent), query: new URLSearchParams(query) };
}

export function useRoute(): Route {
  const [route, setRoute] = useState(current);
  useEffect(() => {
    const on = (): void => setRoute(current());
    addEventListener('hashchange', on);
    return () => removeEventListener('hashchange', on);
  }, []);
  return route;
}

/** The href of a view: `href('fns', id, 'calls')`. */
export function href(...parts: string[]): string {
  return '#/' + parts.map(encodeURIComponent).join('/');
}

export function go(to: string): void {
  location.hash = to.replace(/^#/, '');
}
