/** What the node is doing now, live: calls, errors, latency, containers, memory, detached calls, health. */
import { bytes, Chart, ErrorBox, Figure, num } from '../components.js';
import { useLive, type Health } from '../live.js';

export function HealthList({ health }: { health: Health | null | undefined }) {
  if (health === null) return <p class="muted">The node's health is shown to tokens for every app.</p>;
  if (!health) return <p class="muted">Asking the node…</p>;
  return (
    <ul class="health" aria-label="Health checks">
      <li class={health.ready ? 'ok' : 'bad'}>{health.ready ? 'Ready for calls' : 'Not ready'}</li>
      {Object.entries(health.checks).map(([name, verdict]) => (
        <li key={name} class={verdict === 'ok' ? 'ok' : 'bad'}>
          <b>{name}</b>: {verdict}
        </li>
      ))}
    </ul>
  );
}

export function Overview() {
  const live = useLive();
  const f = live.figures;
  const s = live.summary;
  const noCalls = s && !s.runs_calls ? 'This node runs no calls (an API node): its LBs and runners do' : undefined;
  const c = f?.containers;
  return (
    <section aria-labelledby="overview-title">
      <h1 id="overview-title">Overview</h1>
      <p class="muted live-line" aria-live="off">
        {s ? `${s.role} node` : 'Connecting…'}
        {s?.scope === 'apps' ? ' — figures of your apps only' : ''}
        {' · '}
        {live.connected ? `live, updated ${f ? new Date(f.at).toLocaleTimeString() : ''}` : 'not connected'}
      </p>
      <ErrorBox error={live.error} />
      <div class="figures">
        <Figure label="Calls per second" value={num(f?.calls_per_s)} hint={noCalls} />
        <Figure label="Errors per second" value={num(f?.errors_per_s)} hint={noCalls} />
        <Figure label="Latency p50" value={num(f?.latency_ms?.p50)} unit="ms" hint={noCalls ?? 'no call ended in the last interval'} />
        <Figure label="Latency p95" value={num(f?.latency_ms?.p95)} unit="ms" hint={noCalls ?? 'no call ended in the last interval'} />
        <Figure label="Latency p99" value={num(f?.latency_ms?.p99)} unit="ms" hint={noCalls ?? 'no call ended in the last interval'} />
        <Figure
          label="Cold starts"
          value={f?.cold_share === null || f?.cold_share === undefined ? null : (f.cold_share * 100).toFixed(0)}
          unit="% of calls"
          hint={noCalls ?? 'no calls in the last interval'}
        />
        <Figure label="Containers busy" value={c ? String(c.busy) : null} hint={noCalls} />
        <Figure label="Containers idle" value={c ? String(c.idle) : null} hint={noCalls} />
        <Figure label="Containers starting" value={c ? String(c.starting) : null} hint={noCalls} />
        <Figure label="Containers paused" value={c ? String(c.paused) : null} hint={noCalls} />
        <Figure
          label="Memory used"
          value={f?.memory ? bytes(f.memory.used_bytes) : null}
          unit={f?.memory ? `of ${bytes(f.memory.total_bytes)}` : undefined}
          hint="this node runs no containers, or its token sees its apps only"
        />
        <Figure label="Detached backlog" value={f?.detached?.backlog === null || f?.detached?.backlog === undefined ? null : String(f.detached.backlog)} hint="no queue of detached calls here" />
        <Figure
          label="Dead letters"
          value={f?.detached?.dead_letters === null || f?.detached?.dead_letters === undefined ? null : String(f.detached.dead_letters)}
          unit="since start"
          hint="this node runs no detached calls"
        />
      </div>
      <h2>Last 15 minutes</h2>
      {s?.scope === 'apps' ? (
        <p class="muted">The node's history is shown to tokens for every app.</p>
      ) : (
        <div class="charts">
          <Chart label="Calls per second" points={live.history} pick={(p) => p.calls_per_s} />
          <Chart label="Errors per second" points={live.history} pick={(p) => p.errors_per_s} />
          <Chart label="Latency p95" points={live.history} pick={(p) => p.p95_ms} unit=" ms" />
          <Chart label="Busy containers" points={live.history} pick={(p) => p.busy} />
        </div>
      )}
      <h2>Health</h2>
      <HealthList health={live.health} />
    </section>
  );
}
