/**
 * The fleet, as far as this node knows it. A full node is its own fleet; an
 * API node does not (yet) learn its LBs, runners and pool manager, and says
 * so rather than showing zeros.
 */
import { useLive } from '../live.js';
import { HealthList } from './overview.js';

export function Fleet() {
  const live = useLive();
  const s = live.summary;
  return (
    <section aria-labelledby="fleet-title">
      <h1 id="fleet-title">Fleet</h1>
      {!s ? <p class="muted">Asking the node…</p> : null}
      {s?.role === 'full' ? (
        <p>
          This is a <b>full</b> node: it serves the API and runs every call itself, in its own containers. There are no LBs, runners or pool manager to show; its containers and memory are on the{' '}
          <a href="#/">overview</a>.
        </p>
      ) : null}
      {s && s.role !== 'full' ? (
        <>
          <p>
            This is an <b>{s.role}</b> node. It does not know its LBs, runners or pool manager: they reach it, it does not reach them. Not known here:
          </p>
          <ul>
            <li>
              runners, their calls in flight, memory and containers (each runner's and LB's <code>/metrics</code> has them);
            </li>
            <li>
              the pool manager's groups with their target and actual runners (its <code>/metrics</code>).
            </li>
          </ul>
        </>
      ) : null}
      <h2>This node</h2>
      <HealthList health={live.health} />
    </section>
  );
}
