/**
 * The network function containers join, fenced off from the platform: its
 * own bridge with traffic between its containers off
 * (com.docker.network.bridge.enable_icc=false), and iptables rules scoped
 * to that bridge (isolation.ts) so that a function cannot open a connection
 * to this host (FN_PORT, a gRPC port, Redis, a database), to other function
 * containers, or to link-local and the host's own networks. Everything else
 * stays reachable: functions call public APIs.
 *
 * One network per name (FNTS_FUNCTION_NETWORK_NAME, `fnts-functions`) is
 * shared by every fnts server on the engine, rather than one per server:
 * the engine has a few dozen address pools for bridges and a test suite
 * starts hundreds of servers, some at once, some killed; a shared network
 * costs one inspection at a server's start once it exists.
 *
 * Lifetimes, and what keeps the fence closed:
 *
 *   - a fence (its chains and jumps) belongs to one network, by id: whoever
 *     creates the network installs it before any container of its own joins,
 *     every server checks it before its first container (and at each
 *     readiness probe) and puts back what is missing; it is removed only
 *     with its network, or once its network is gone (a sweep at each start
 *     and stop). So while the network exists its fence does, whoever made it
 *     and whoever is still running;
 *   - only a process that can install the rules (root, in the engine's
 *     network namespace) creates the network. A process that cannot (a pool
 *     manager's runner in a container) joins the network if it exists,
 *     trusting the process on the engine's host that made it, and otherwise
 *     runs functions on Docker's bridge, warns, and /ready says the fence is
 *     missing;
 *   - each server that can fence writes its name in the FNTS-USERS chain
 *     while it runs. At stop it takes its name out, and the last one (names
 *     of dead processes do not count) removes the network: the engine
 *     refuses while a container is attached, and then the network and its
 *     fence stay for the next server;
 *   - a server whose containers find the network gone (another removed it
 *     between two calls) makes it again, fence first, and retries once
 *     (DockerDriver asks reinstate()).
 *
 *   start ──> user noted ──> network made or found ──> fence checked/installed ──> containers join
 *   stop  ──> user gone ──> last one? ──yes──> network removed? ──yes──> fence removed
 *                              │no                   │no (containers attached)
 *                              └──── both stay ──────┘
 */
import { randomBytes } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { networkInterfaces } from 'node:os';
import type { BaseLogger } from 'pino';
import Docker from 'dockerode';
import { within } from '../../time/index.js';
import { engineMessage, statusCode } from './engine-errors.js';
import { DriverError } from '../driver.js';
import { HostIptables, IptablesError, type Iptables } from './iptables.js';
import {
  blockList,
  bridgeName,
  compactCidrs,
  fenceChains,
  fencedIds,
  fenceRestore,
  fenceState,
  hostNetworks,
  covers,
  onBridges,
  nameservers,
  normalizeCidr,
  parseRules,
  removalRestore,
  USERS_CHAIN,
  usersOf,
  type BlockSpec,
  type InterfaceAddress,
  type RuleSnapshot,
} from './isolation.js';

/** FNTS_FUNCTION_NETWORK: fence the functions' network (the default), or leave it open as before. */
export type FunctionNetworkMode = 'isolated' | 'open';

/** How far functions are fenced off, and why. */
export type Isolation =
  /** FNTS_FUNCTION_NETWORK=open: Docker's default bridge, nothing fenced. */
  | { readonly kind: 'open' }
  /** FN_DOCKER_NETWORKS: the operator's network; fnts adds no rules. */
  | { readonly kind: 'operator'; readonly network: string }
  /** This process holds the fence (its rules are checked here). */
  | { readonly kind: 'fenced'; readonly network: string; readonly bridge: string; readonly blocked: readonly string[] }
  /** The network exists and the engine's host fences it; this process cannot see the rules (it runs in a container). */
  | { readonly kind: 'fenced-by-host'; readonly network: string }
  /** Wanted, not possible here: functions run on Docker's default bridge. */
  | { readonly kind: 'missing'; readonly reason: string };

/** Where a new container is attached: what DockerDriver asks (FunctionNetwork implements it). */
export interface ContainerNetwork {
  /**
   * The network a new container joins; undefined for the engine's default
   * bridge. May wait while the network and its fence are made; rejects
   * with `signal`'s reason when it aborts first, with DriverError when the
   * engine does not answer.
   */
  networkFor(signal?: AbortSignal): Promise<string | undefined>;
  /**
   * Asked when a container on `network` could not be created or started:
   * true when the network had gone (another server removed it) and is back,
   * fenced, so that one more try makes sense. Never rejects.
   */
  reinstate(network: string): Promise<boolean>;
  /** Releases what this process holds; bounded, never rejects, idempotent. */
  close(): Promise<void>;
}

export interface FunctionNetworkOptions {
  /** Defaults to the engine named by DOCKER_HOST, else /var/run/docker.sock. */
  readonly docker?: Docker;
  /** FNTS_FUNCTION_NETWORK */
  readonly mode: FunctionNetworkMode;
  /** FN_DOCKER_NETWORKS: when set, its first network is joined and fnts fences nothing. */
  readonly operatorNetworks: readonly string[];
  /** FNTS_FUNCTION_NETWORK_NAME */
  readonly name: string;
  /** FNTS_FUNCTION_NETWORK_BLOCK */
  readonly block: BlockSpec;
  /** This process's identity (host/pid/start), written in FNTS-USERS while it runs. */
  readonly instance: string;
  /** Whether an identity's process still runs: false only when it is provably dead. */
  readonly isAlive: (instance: string) => boolean | undefined;
  readonly log: Pick<BaseLogger, 'info' | 'warn' | 'debug'>;
  /** Defaults to this host's iptables programs. */
  readonly iptables?: Iptables;
  /** This host's interfaces (default os.networkInterfaces()). */
  readonly interfaces?: () => Readonly<Record<string, readonly InterfaceAddress[] | undefined>>;
  /** The resolv.conf the engine forwards DNS by (default the host's; systemd-resolved's when that lists only loopback). */
  readonly resolvConf?: () => string;
}

/** The label on networks fnts makes for functions. */
export const NETWORK_LABEL = 'fnts.network';

/** How long stop may spend on the network and its fence. */
const CLOSE_TIMEOUT_MS = 10_000;
/** Creates of the functions' network tried while the engine refuses it and none is there by name (one being removed). */
const CREATE_ATTEMPTS = 5;
/** How often a server whose fence is missing looks again when it starts a container (a pool manager may make the network later). */
const RECHECK_MS = 10_000;

type NetworkInfo = Docker.NetworkInspectInfo;

function defaultResolvConf(): string {
  const read = (path: string): string => {
    try {
      return readFileSync(path, 'utf8');
    } catch {
      return '';
    }
  };
  const host = read('/etc/resolv.conf');
  // systemd-resolved's stub (127.0.0.53) is no server a container can reach: the engine uses the real ones, as here.
  return nameservers(host).length > 0 ? host : read('/run/systemd/resolve/resolv.conf');
}

/** The IPv4 subnets of the engine's networks. */
function engineSubnets(networks: readonly NetworkInfo[]): string[] {
  return networks.flatMap((n) => (n.IPAM?.Config ?? []).map((c) => c.Subnet ?? '').filter((s) => normalizeCidr(s) !== undefined));
}

/** What `iptables` here can do: fence the engine's bridges, or why not. */
type Capability = { readonly ok: true } | { readonly ok: false; readonly reason: string };

export class FunctionNetwork implements ContainerNetwork {
  private readonly docker: Docker;
  private readonly iptables: Iptables;
  readonly bridge: string;
  /** The isolation the last look found (pending while one is under way). */
  private current: Promise<Isolation> | undefined;
  private lookedAt = 0;
  private failed = false;
  /** Looks run one at a time: two in one process must not install the same fence at once. */
  private queue: Promise<unknown> = Promise.resolve();
  /** This process's name is in FNTS-USERS. */
  private listed = false;
  /** The last state logged, to log each change once. */
  private told = '';
  private closed: Promise<void> | undefined;
  /** This server among the process's (a process may run several: tests do), in its FNTS-USERS rule. */
  private readonly server = randomBytes(4).toString('hex');

  constructor(private readonly o: FunctionNetworkOptions) {
    this.docker = o.docker ?? new Docker();
    this.iptables = o.iptables ?? new HostIptables();
    this.bridge = bridgeName(o.name);
  }

  /** Whether this server fences its functions (FNTS_FUNCTION_NETWORK=isolated, no FN_DOCKER_NETWORKS): then /ready asks check(). */
  get wanted(): boolean {
    return this.o.mode === 'isolated' && this.o.operatorNetworks.length === 0;
  }

  /**
   * Starts making the network and its fence, unless a container or a
   * probe has already, without waiting (the first container waits
   * instead). Says once what functions get.
   */
  start(): void {
    void this.state();
  }

  async networkFor(signal?: AbortSignal): Promise<string | undefined> {
    const state = await untilAborted(this.state(), signal);
    switch (state.kind) {
      case 'open':
      case 'missing':
        return undefined;
      default:
        return state.network;
    }
  }

  /** The isolation as last found; a look again when none was made, the last failed, or the fence was missing a while ago. */
  private state(): Promise<Isolation> {
    const stale = this.failed || (this.lastKind === 'missing' && Date.now() - this.lookedAt > RECHECK_MS);
    if (!this.current || stale) this.current = this.look(true);
    return this.current;
  }

  private lastKind: Isolation['kind'] | undefined;

  /** One look (queued behind any other): what `ensure` finds, remembered and told. Its rejection is handled here too. */
  private look(create: boolean): Promise<Isolation> {
    const p = this.queue.then(() => this.ensure(create));
    this.queue = p.catch(() => undefined);
    void p.then(
      (state) => {
        this.failed = false;
        this.lookedAt = Date.now();
        this.lastKind = state.kind;
        this.tell(state);
      },
      (err: unknown) => {
        this.failed = true;
        if (this.closed) return;
        // Probes look every few seconds: the same failure is told once.
        const said = `failed: ${engineMessage(err)}`;
        if (said === this.told) return;
        this.told = said;
        this.o.log.warn({ err: engineMessage(err) }, `could not set up the functions' network ${this.o.name} (calls fail until it is): ${engineMessage(err)}`);
      },
    );
    return p;
  }

  private tell(state: Isolation): void {
    // Once the server stops, a look that ends late says nothing: "fnts stopped" is its last line.
    if (this.closed) return;
    const said = JSON.stringify(state.kind === 'fenced' ? { ...state, blocked: [] } : state);
    if (said === this.told) return;
    this.told = said;
    const log = this.o.log;
    switch (state.kind) {
      case 'open':
        log.warn("functions' network is open (FNTS_FUNCTION_NETWORK=open): functions can reach this host's ports, other containers and link-local addresses");
        break;
      case 'operator':
        log.info({ network: state.network }, `functions join ${state.network} (FN_DOCKER_NETWORKS): fnts adds no network rules; fence that network yourself`);
        break;
      case 'fenced':
        log.info(
          { network: state.network, bridge: state.bridge, blocked: state.blocked },
          `functions join ${state.network} (bridge ${state.bridge}): they cannot reach this host, other functions or ${state.blocked.length} blocked ranges (FNTS_FUNCTION_NETWORK_BLOCK)`,
        );
        break;
      case 'fenced-by-host':
        log.info({ network: state.network }, `functions join ${state.network}, fenced by the engine's host (its rules cannot be seen from here)`);
        break;
      case 'missing':
        log.warn({ reason: state.reason }, `functions are not fenced off from this host and its networks: ${state.reason}`);
        break;
    }
  }

  async reinstate(network: string): Promise<boolean> {
    if (!this.wanted || network !== this.o.name) return false;
    try {
      await this.docker.getNetwork(network).inspect();
      // Still there: the failure was something else.
      return false;
    } catch (err) {
      if (statusCode(err) !== 404) return false;
    }
    this.current = this.look(true);
    try {
      return (await this.current).kind === 'fenced';
    } catch {
      return false;
    }
  }

  /**
   * For /ready: resolves while functions are fenced (the rules of the
   * network, if it exists now, are checked and what is missing put back);
   * rejects saying why not. A network not there yet counts as fenced: it is
   * made, fence first, for the next container.
   */
  async check(signal?: AbortSignal): Promise<void> {
    if (!this.wanted) return;
    // Not the state containers go by: a look that makes nothing (the network is made when a container needs it).
    const state = await untilAborted(this.look(false), signal);
    if (state.kind === 'missing') throw new Error(`functions are not fenced off from this host: ${state.reason}`);
  }

  /**
   * What is wanted and possible, made so: the network exists (when
   * `create`) and its fence is complete, and fences of networks that are
   * gone are removed.
   */
  private async ensure(create: boolean): Promise<Isolation> {
    if (this.o.mode === 'open') return { kind: 'open' };
    const operator = this.o.operatorNetworks[0];
    if (operator !== undefined) return { kind: 'operator', network: operator };
    const name = this.o.name;
    // The rules first, then the networks: a fence in this snapshot whose network the later list lacks belongs to a removed network.
    const rules = await this.readRules();
    const networks = await this.networks();
    const can = this.capability(rules, networks);
    const snap = can.ok ? rules.snap : undefined;
    // Named before the network is made or used, so that a server stopping meanwhile sees this one (see release()).
    if (snap && !this.listed) await this.enlist(snap.chains.has(USERS_CHAIN));
    let ours: NetworkInfo | undefined = networks.find((n) => n.Name === name);
    if (ours && !this.madeByFnts(ours)) {
      return {
        kind: 'missing',
        reason: `a network named ${name} exists that fnts did not make (it needs the label ${NETWORK_LABEL}=functions, bridge ${this.bridge}, no traffic between containers): remove it (docker network rm ${name}), or set FNTS_FUNCTION_NETWORK_NAME to another name`,
      };
    }
    if (!snap) return ours ? { kind: 'fenced-by-host', network: name } : { kind: 'missing', reason: can.ok ? 'no rules' : can.reason };
    if (!ours && create) ours = await this.create();
    if (ours) {
      const blocked = blockList(this.o.block, hostNetworks(this.interfaces()), engineSubnets([...networks, ours]));
      await this.fence(snap, ours, blocked);
      await this.sweep(snap, [...networks, ours]);
      return { kind: 'fenced', network: name, bridge: this.bridge, blocked };
    }
    await this.sweep(snap, networks);
    return { kind: 'fenced', network: name, bridge: this.bridge, blocked: blockList(this.o.block, hostNetworks(this.interfaces()), engineSubnets(networks)) };
  }

  /** Installs what of `network`'s fence the snapshot lacks; the ranges already blocked stay (servers with other lists add to them). */
  private async fence(snap: RuleSnapshot, network: NetworkInfo, blocked: readonly string[]): Promise<void> {
    const now = fenceState(snap, { networkId: network.Id });
    if (now.input && now.forward && now.jumpIn && now.jumpFwd && blocked.every((c) => covers(now.blocked, c))) return;
    const fence = {
      network: this.o.name,
      networkId: network.Id,
      bridge: this.bridge,
      nameservers: nameservers((this.o.resolvConf ?? defaultResolvConf)()),
      blocked: compactCidrs([...now.blocked, ...blocked]),
    };
    await this.iptables.restore(fenceRestore(fence, { input: !now.jumpIn, forward: !now.jumpFwd }));
    this.o.log.debug({ network: this.o.name, chains: fenceChains(network.Id), blocked: fence.blocked }, "installed the functions' network fence");
  }

  /** Removes the fences whose network is not among `networks` (listed after `snap` was taken). Never rejects. */
  private async sweep(snap: RuleSnapshot, networks: readonly NetworkInfo[]): Promise<void> {
    const live = new Set(networks.map((n) => n.Id.slice(0, 12)));
    const orphans = [...fencedIds(snap)].filter((id) => !live.has(id));
    if (orphans.length === 0) return;
    try {
      await this.iptables.restore(removalRestore(snap, (id) => orphans.includes(id)));
      this.o.log.info({ networks: orphans }, 'removed the fences of functions networks that are gone');
    } catch (err) {
      // Another server removed them first, most likely: the next sweep looks again.
      this.o.log.debug({ err: engineMessage(err) }, 'could not remove the fences of functions networks that are gone');
    }
  }

  private madeByFnts(n: NetworkInfo): boolean {
    return n.Labels?.[NETWORK_LABEL] === 'functions' && n.Options?.['com.docker.network.bridge.name'] === this.bridge && n.Options?.['com.docker.network.bridge.enable_icc'] === 'false';
  }

  private interfaces(): Readonly<Record<string, readonly InterfaceAddress[] | undefined>> {
    return (this.o.interfaces ?? networkInterfaces)();
  }

  private async networks(): Promise<NetworkInfo[]> {
    try {
      return await this.docker.listNetworks();
    } catch (err) {
      throw new DriverError(`Docker engine error listing networks: ${engineMessage(err)}`, { cause: err });
    }
  }

  /**
   * Makes the functions' network, or takes the one another server made at
   * the same moment. The engine may also refuse a create while the last
   * server out is removing the network (its bridge name still taken, the
   * network already gone by name): tried again, up to CREATE_ATTEMPTS times.
   */
  private async create(): Promise<NetworkInfo> {
    const name = this.o.name;
    for (let attempt = 1; ; attempt++) {
      let refused: unknown;
      try {
        await this.docker.createNetwork({
          Name: name,
          Driver: 'bridge',
          CheckDuplicate: true,
          EnableIPv6: false,
          Internal: false,
          Attachable: false,
          Labels: { [NETWORK_LABEL]: 'functions' },
          Options: { 'com.docker.network.bridge.name': this.bridge, 'com.docker.network.bridge.enable_icc': 'false' },
        });
      } catch (err) {
        // Most often another server made it at the same moment (the engine refuses a second bridge of the same name): use theirs.
        refused = err;
      }
      try {
        const made = (await this.docker.getNetwork(name).inspect()) as NetworkInfo;
        if (!this.madeByFnts(made)) throw new DriverError(`the network ${name} that appeared is not one fnts made: remove it (docker network rm ${name})`);
        return made;
      } catch (err) {
        if (err instanceof DriverError) throw err;
        if (refused !== undefined && statusCode(err) === 404 && attempt < CREATE_ATTEMPTS) {
          await new Promise((resolve) => setTimeout(resolve, 100 * attempt));
          continue;
        }
        throw new DriverError(`could not create the functions' network ${name}: ${engineMessage(refused ?? err)}`, { cause: refused ?? err });
      }
    }
  }

  /** This host's filter table, or why it cannot be read here. */
  private async readRules(): Promise<{ readonly snap: RuleSnapshot; readonly reason?: undefined } | { readonly snap?: undefined; readonly reason: string }> {
    try {
      return { snap: parseRules(await this.iptables.run(['-S'])) };
    } catch (err) {
      return { reason: err instanceof IptablesError && err.code === 'ENOENT' ? 'iptables is not installed here' : `iptables cannot read the filter table here (${engineMessage(err)})` };
    }
  }

  /**
   * Whether this process can fence the engine's bridges: iptables answers,
   * with Docker's DOCKER-USER chain, and the engine's bridges are on this
   * process's interfaces (the same network namespace, where rules on them
   * apply).
   */
  private capability(rules: { readonly snap?: RuleSnapshot; readonly reason?: string }, networks: readonly NetworkInfo[]): Capability {
    const open = 'or set FNTS_FUNCTION_NETWORK=open to accept unfenced functions';
    if (!rules.snap || !rules.snap.chains.has('DOCKER-USER')) {
      const why = rules.reason ?? "Docker's DOCKER-USER chain is not in this host's iptables (the engine runs with its iptables rules off, or on another iptables backend)";
      return { ok: false, reason: `${why}: run fnts as root on the Docker engine's host, with iptables and the engine's iptables rules on, ${open}` };
    }
    if (!onBridges(networks, this.interfaces())) {
      return {
        ok: false,
        reason:
          "the Docker engine's bridges are not on this process's interfaces (it runs in a container, or uses an engine on another host), so its rules would not apply there: " +
          `run fnts on the engine's host (a pool manager there fences the network ${this.o.name} for its runners), ${open}`,
      };
    }
    return { ok: true };
  }

  /** Writes this server's name in FNTS-USERS (made when missing, or when the last server removed it meanwhile). */
  private async enlist(chainExists: boolean): Promise<void> {
    const rule = this.userRule();
    for (let attempt = 1; ; attempt++) {
      if (!chainExists || attempt > 1) await this.iptables.run(['-N', USERS_CHAIN]).catch(() => undefined);
      try {
        await this.iptables.run(['-A', USERS_CHAIN, ...rule]);
        this.listed = true;
        return;
      } catch (err) {
        if (attempt >= 2) throw err;
      }
    }
  }

  /** This process's rule in FNTS-USERS, as iptables arguments (usersOf in isolation.ts reads it back). */
  private userRule(): string[] {
    return ['-m', 'comment', '--comment', `fnts: ${this.o.name} used by ${this.o.instance} ${this.server}`];
  }

  close(): Promise<void> {
    this.closed ??= within(
      this.release().catch((err: unknown) =>
        this.o.log.warn({ err: engineMessage(err) }, `could not release the functions' network ${this.o.name}: ${engineMessage(err)}; the next fnts server to stop removes it`),
      ),
      CLOSE_TIMEOUT_MS,
      () => this.o.log.warn(`releasing the functions' network ${this.o.name} took over ${CLOSE_TIMEOUT_MS} ms; left as it is (the next fnts server to stop removes it)`),
      { unref: true },
    );
    return this.closed;
  }

  /** This process's name out of FNTS-USERS; the last one out removes the network (if no container is on it) and its fence. */
  private async release(): Promise<void> {
    // A look still under way (a start, a probe) ends first: its rules are then known.
    await this.queue;
    if (!this.listed) return;
    this.listed = false;
    await this.iptables.run(['-D', USERS_CHAIN, ...this.userRule()]).catch(() => undefined);
    let others = false;
    const dead: string[] = [];
    for (const u of usersOf(parseRules(await this.iptables.run(['-S', USERS_CHAIN]).catch(() => '')), this.o.name)) {
      if (u.instance === this.o.instance && u.server === this.server) continue;
      if (u.instance !== this.o.instance && this.o.isAlive(u.instance) === false) dead.push(u.rule);
      else others = true;
    }
    // Servers that were killed: their names go (all at once, or none if another server took them out first).
    if (dead.length > 0) await this.iptables.restore(['*filter', ...dead.map((r) => `-D ${USERS_CHAIN} ${r}`), 'COMMIT', ''].join('\n')).catch(() => undefined);
    if (others) return;
    let network: NetworkInfo | undefined;
    try {
      network = (await this.docker.getNetwork(this.o.name).inspect()) as NetworkInfo;
    } catch (err) {
      if (statusCode(err) !== 404) throw err;
    }
    if (network && this.madeByFnts(network)) {
      try {
        await this.docker.getNetwork(network.Id).remove();
        this.o.log.info({ network: this.o.name }, "removed the functions' network and its fence (no other fnts server uses it)");
      } catch (err) {
        // Containers are still attached (a server killed earlier left them): network and fence stay.
        if (statusCode(err) !== 404) this.o.log.info({ network: this.o.name, reason: engineMessage(err) }, "left the functions' network and its fence in place: containers are still on it");
      }
    }
    const snap = parseRules(await this.iptables.run(['-S']));
    await this.sweep(snap, await this.networks());
    // An empty users chain goes too (refused, harmlessly, when a server has just written its name).
    await this.iptables.run(['-X', USERS_CHAIN]).catch(() => undefined);
  }
}

/** `work`, or `signal`'s reason as soon as it aborts; `work`'s own outcome is handled either way. */
function untilAborted<T>(work: Promise<T>, signal: AbortSignal | undefined): Promise<T> {
  if (!signal) return work;
  if (signal.aborted) return Promise.reject(signal.reason as Error);
  return new Promise<T>((resolve, reject) => {
    const onAbort = (): void => reject(signal.reason as Error);
    signal.addEventListener('abort', onAbort, { once: true });
    work.then(
      (v) => {
        signal.removeEventListener('abort', onAbort);
        resolve(v);
      },
      (err: unknown) => {
        signal.removeEventListener('abort', onAbort);
        reject(err as Error);
      },
    );
  });
}
