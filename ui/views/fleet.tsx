/**
 * The fleet, as far as this node knows it: the nodes FNTS_CONSOLE_FLEET
 * names (LBs, pure runners, pool managers), read from their /metrics by
 * this node (GET /v2/console/fleet) every 2 seconds while the view is open.
 * What a node did not report, or what cannot be known while it does not
 * answer, is said in words rather than shown as 0.
 */
import { useEffect, useState } from 'preact/hooks';
import { api } from '../api.js';
import { bytes, Empty, ErrorBox, Figure, messageOf } from '../components.js';
import { useLive, type Containers } from '../live.js';
import { HealthList } from './overview.js';

interface FleetRunner {
  address: string;
  up: boolean;
  placed: number | null;
}
interface PoolGroup {
  group: string;
  target: number | null;
  runners: Record<string, number> | null;
}
interface FleetNode {
  url: string;
  up: boolean | null;
  error: string | null;
  answered_at: string | null;
  role: string | null;
  version: string | null;
  calls_running: number | null;
  calls_waiting: number | null;
  memory: { used_bytes: number; total_bytes: number } | null;
  containers: Containers | null;
  runners: FleetRunner[] | null;
  groups: PoolGroup[] | null;
  lbs: number | null;
}
interface FleetReport {
  role: string;
  scope: 'node' | 'apps';
  nodes: FleetNode[] | null;
}

const EVERY_MS = 2000;
const NOT_REPORTED = 'not reported';
/** A pool manager's runner states, in their order; others it reports come after. */
const POOL_STATES = ['active', 'starting', 'draining', 'removing'];
const EXAMPLE = 'FNTS_CONSOLE_FLEET=http://lb-1:8080,http://runner-1:8080,http://poolmanager:8080';

/** The fleet report, asked for again 2 s after each ask began while the view is shown (and its tab is not hidden). */
function useFleet(): { report: FleetReport | undefined; error: string | undefined; at: Date | undefined } {
  const [state, setState] = useState<{ report: FleetReport | undefined; error: string | undefined; at: Date | undefined }>({ report: undefined, error: undefined, at: undefined });
  useEffect(() => {
    let shown = true;
    let timer: ReturnType<typeof setTimeout> | undefined;
    const ask = async (): Promise<void> => {
      const began = Date.now();
      // A tab in the background asks nothing (this node then reads no other): it asks again within 2 s of being shown.
      if (document.visibilityState !== 'hidden') {
        try {
          const report = await api<FleetReport>('/v2/console/fleet');
          if (shown) setState({ report, error: undefined, at: new Date() });
        } catch (err) {
          if (shown) setState((s) => ({ ...s, error: messageOf(err) }));
        }
      }
      if (shown) timer = setTimeout(() => void ask(), Math.max(0, EVERY_MS - (Date.now() - began)));
    };
    void ask();
    return () => {
      shown = false;
      clearTimeout(timer);
    };
  }, []);
  return state;
}

const time = (iso: string): string => new Date(iso).toLocaleTimeString();
const count = (n: number | null | undefined): string | null => (n === null || n === undefined ? null : String(n));

function NodeState({ node }: { node: FleetNode }) {
  if (node.up === null) return <p class="muted">Not read yet…</p>;
  if (node.up)
    return (
      <p class="node-state ok">
        Up{node.answered_at ? `, answered at ${time(node.answered_at)}` : ''}
        {node.version ? <span class="muted"> · fnts {node.version}</span> : null}
      </p>
    );
  return (
    <p class="node-state bad">
      {node.error ?? 'not reachable'}
      {node.answered_at ? ` (last answered at ${time(node.answered_at)})` : ' (it has not answered since this node started)'}
    </p>
  );
}

function CallFigures({ node }: { node: FleetNode }) {
  const c = node.containers;
  const containers = (state: keyof Containers) => <Figure label={`Containers ${state}`} value={count(c?.[state])} hint={NOT_REPORTED} />;
  return (
    <div class="figures small">
      <Figure label="Calls running" value={count(node.calls_running)} hint={NOT_REPORTED} />
      <Figure label="Calls waiting" value={count(node.calls_waiting)} hint={NOT_REPORTED} />
      <Figure label="Memory used" value={node.memory ? bytes(node.memory.used_bytes) : null} unit={node.memory ? `of ${bytes(node.memory.total_bytes)}` : undefined} hint={NOT_REPORTED} />
      {containers('busy')}
      {containers('idle')}
      {containers('starting')}
      {containers('paused')}
    </div>
  );
}

function LbRunners({ node }: { node: FleetNode }) {
  if (node.runners === null) return <p class="muted">Its runners: {NOT_REPORTED}.</p>;
  if (node.runners.length === 0) return <p class="muted">It places calls on no runner now.</p>;
  return (
    <div class="scroll">
      <table aria-label={`Runners of ${node.url}`}>
        <thead>
          <tr>
            <th scope="col">Runner (gRPC)</th>
            <th scope="col">State</th>
            <th scope="col">Calls placed</th>
          </tr>
        </thead>
        <tbody>
          {node.runners.map((r) => (
            <tr key={r.address}>
              <td>
                <code>{r.address}</code>
              </td>
              <td class={r.up ? 'ok' : 'bad'}>{r.up ? 'places calls' : 'held down: not reachable'}</td>
              <td>{count(r.placed) ?? NOT_REPORTED}</td>
            </tr>
          ))}
        </tbody>
      </table>
    </div>
  );
}

function PoolGroups({ node }: { node: FleetNode }) {
  if (node.groups === null) return <p class="muted">Its runner groups: {NOT_REPORTED}.</p>;
  const lbs = <p class="muted">LBs advertising to it: {count(node.lbs) ?? NOT_REPORTED}.</p>;
  if (node.groups.length === 0)
    return (
      <>
        <p class="muted">It has no runner group yet (a group appears when an LB asks for it).</p>
        {lbs}
      </>
    );
  const reported = new Set(node.groups.flatMap((g) => Object.keys(g.runners ?? {})));
  const states = [...POOL_STATES, ...[...reported].filter((s) => !POOL_STATES.includes(s)).sort()];
  return (
    <>
      <div class="scroll">
        <table aria-label={`Groups of ${node.url}`}>
          <thead>
            <tr>
              <th scope="col">Group</th>
              <th scope="col">Target</th>
              {states.map((s) => (
                <th key={s} scope="col">
                  {s[0]!.toUpperCase() + s.slice(1)}
                </th>
              ))}
            </tr>
          </thead>
          <tbody>
            {node.groups.map((g) => (
              <tr key={g.group}>
                <td>{g.group}</td>
                <td>{count(g.target) ?? NOT_REPORTED}</td>
                {states.map((s) => (
                  <td key={s}>{g.runners ? String(g.runners[s] ?? 0) : NOT_REPORTED}</td>
                ))}
              </tr>
            ))}
          </tbody>
        </table>
      </div>
      {lbs}
    </>
  );
}

function NodeCard({ node, index }: { node: FleetNode; index: number }) {
  const id = `fleet-node-${index}`;
  const role = node.role ?? (node.up ? 'role not reported' : 'role not known');
  // Its figures are the last answer's: none while it does not answer.
  const answered = node.up === true;
  const runsCalls = node.role === null || node.role === 'full' || node.role === 'pure-runner';
  return (
    <section class="node" aria-labelledby={id}>
      <h2>
        <span class="node-role">{role}</span> <span id={id}>{node.url}</span>
      </h2>
      <NodeState node={node} />
      {answered && runsCalls ? <CallFigures node={node} /> : null}
      {answered && (node.role === 'lb' || node.runners !== null) ? <LbRunners node={node} /> : null}
      {answered && (node.role === 'poolmanager' || node.groups !== null) ? <PoolGroups node={node} /> : null}
      {node.up === false ? <p class="muted">Its figures are not known while it does not answer.</p> : null}
    </section>
  );
}

function Nodes({ nodes }: { nodes: FleetNode[] }) {
  const down = nodes.filter((n) => n.up === false).length;
  return (
    <>
      <p>
        {nodes.length} {nodes.length === 1 ? 'node' : 'nodes'} named by <code>FNTS_CONSOLE_FLEET</code>
        {down > 0 ? `; ${down} not answering` : ''}.
      </p>
      {nodes.map((n, i) => (
        <NodeCard key={n.url} node={n} index={i} />
      ))}
    </>
  );
}

function HowToConfigure({ role }: { role: string }) {
  return (
    <Empty>
      <p>
        {role === 'full'
          ? 'This full node runs every call itself; it knows no other node.'
          : `This ${role} node does not know its LBs, runners or pool manager: they reach it, it does not reach them.`}{' '}
        To show them here, name the HTTP port (<code>FN_PORT</code>) of each in this node's environment and restart it:
      </p>
      <p>
        <code>{EXAMPLE}</code>
      </p>
      <p>It then reads their /metrics every 2 seconds while this view is open: runners with their calls, memory and containers; LBs with their runners; pool managers with their groups.</p>
    </Empty>
  );
}

export function Fleet() {
  const live = useLive();
  const { report, error, at } = useFleet();
  return (
    <section aria-labelledby="fleet-title">
      <h1 id="fleet-title">Fleet</h1>
      <p class="muted live-line" aria-live="off">
        {report ? `${report.role} node` : 'Asking the node…'}
        {at ? ` · read at ${at.toLocaleTimeString()}, every 2 s` : ''}
      </p>
      <ErrorBox error={error} />
      {report?.scope === 'apps' ? <p class="muted">The fleet is shown to tokens for every app.</p> : null}
      {report?.nodes?.length === 0 ? <HowToConfigure role={report.role} /> : null}
      {report?.nodes && report.nodes.length > 0 ? <Nodes nodes={report.nodes} /> : null}
      <h2>This node</h2>
      <HealthList health={live.health} />
    </section>
  );
}
