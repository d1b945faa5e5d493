/**
 * The fence around the functions' network, as data: which IPv4 ranges its
 * containers may not reach, and the iptables rules that say so. Nothing
 * here runs a program or asks the engine (network.ts does); everything is a
 * function of what it is given, so that it is tested without a host.
 *
 * Where the rules sit (the filter table; `<bridge>` is the network's own
 * bridge interface, `<id>` the first 12 hex digits of its network id):
 *
 *   INPUT        -i <bridge> -j FNTS-IN-<id>    traffic from functions to this host itself
 *   DOCKER-USER  -i <bridge> -j FNTS-FWD-<id>   traffic from functions to anywhere else
 *
 *   FNTS-IN-<id>:  answers to connections this host opened   RETURN
 *                  DNS to the host's nameservers              RETURN
 *                  anything else                              REJECT
 *   FNTS-FWD-<id>: DNS to the host's nameservers              RETURN
 *                  other containers on the same bridge        REJECT
 *                  each blocked range (as addressed, and as
 *                  first addressed before a port forward)     REJECT
 *                  anything else                              RETURN (counted: "allowed")
 *
 * The chains belong to one network (its id is in their names) and live as
 * long as it does: whoever creates the network installs them before a
 * container joins it, and whoever removes it removes them. REJECT rather
 * than DROP: a blocked function fails at once (EHOSTUNREACH, "administratively
 * prohibited") instead of hanging until its timeout. Docker's embedded DNS
 * (127.0.0.11) answers inside each container's own namespace, but forwards
 * what it cannot answer from there to the host's nameservers: those stay
 * reachable on port 53 even when they sit in a blocked range (a LAN's
 * resolver usually does).
 */
import { createHash } from 'node:crypto';

/** The link-local range: cloud metadata services (169.254.169.254) and the like. */
export const LINK_LOCAL = '169.254.0.0/16';

/** FNTS_FUNCTION_NETWORK_BLOCK: the default list (link-local and the host's own networks) or not, and ranges of the operator's. */
export interface BlockSpec {
  /** Block link-local and the host's own networks. */
  readonly defaults: boolean;
  /** More IPv4 ranges (a.b.c.d/n), as the operator wrote them. */
  readonly cidrs: readonly string[];
}

/** An interface's address as os.networkInterfaces() lists it. */
export interface InterfaceAddress {
  readonly address: string;
  readonly netmask: string;
  readonly family: string | number;
  readonly internal: boolean;
}

function ipv4ToInt(address: string): number | undefined {
  const parts = address.split('.');
  if (parts.length !== 4) return undefined;
  let n = 0;
  for (const p of parts) {
    if (!/^\d{1,3}$/.test(p) || Number(p) > 255) return undefined;
    n = n * 256 + Number(p);
  }
  return n;
}

function intToIpv4(n: number): string {
  return [n >>> 24, (n >>> 16) & 255, (n >>> 8) & 255, n & 255].join('.');
}

function prefixMask(bits: number): number {
  return bits === 0 ? 0 : (0xffffffff << (32 - bits)) >>> 0;
}

/** A range with its host bits cleared (10.1.2.3/8 -> 10.0.0.0/8; a bare address is /32), or undefined when it is not an IPv4 range. */
export function normalizeCidr(cidr: string): string | undefined {
  const [address, bits = '32', extra] = cidr.trim().split('/');
  if (extra !== undefined || !/^\d{1,2}$/.test(bits) || Number(bits) > 32) return undefined;
  const n = ipv4ToInt(address ?? '');
  if (n === undefined) return undefined;
  return `${intToIpv4((n & prefixMask(Number(bits))) >>> 0)}/${Number(bits)}`;
}

function contains(outer: string, inner: string): boolean {
  const [oa, ob] = outer.split('/');
  const [ia, ib] = inner.split('/');
  if (Number(ob) > Number(ib)) return false;
  const mask = prefixMask(Number(ob));
  return (ipv4ToInt(oa!)! & mask) >>> 0 === (ipv4ToInt(ia!)! & mask) >>> 0;
}

/** Whether `address` (IPv4) lies in `cidr`. */
export function inCidr(address: string, cidr: string): boolean {
  const range = normalizeCidr(cidr);
  return range !== undefined && ipv4ToInt(address) !== undefined && contains(range, `${address}/32`);
}

/** Whether one of `ranges` holds all of `cidr`. */
export function covers(ranges: readonly string[], cidr: string): boolean {
  const inner = normalizeCidr(cidr);
  return (
    inner !== undefined &&
    ranges.some((r) => {
      const outer = normalizeCidr(r);
      return outer !== undefined && contains(outer, inner);
    })
  );
}

/** Ranges normalized, without duplicates or ranges inside another of the list, in address order (a stable list for the rules). */
export function compactCidrs(cidrs: Iterable<string>): string[] {
  const all = [...new Set([...cidrs].map(normalizeCidr).filter((c): c is string => c !== undefined))];
  const kept = all.filter((c) => !all.some((o) => o !== c && contains(o, c)));
  return kept.sort((a, b) => ipv4ToInt(a.split('/')[0]!)! - ipv4ToInt(b.split('/')[0]!)! || Number(a.split('/')[1]) - Number(b.split('/')[1]));
}

/** The IPv4 networks this host's interfaces are on (loopback left out: a container cannot route there), e.g. eth0's 192.168.1.0/24, docker0's 172.17.0.0/16. */
export function hostNetworks(interfaces: Readonly<Record<string, readonly InterfaceAddress[] | undefined>>): string[] {
  const out: string[] = [];
  for (const addrs of Object.values(interfaces)) {
    for (const a of addrs ?? []) {
      if (a.internal || (a.family !== 'IPv4' && a.family !== 4)) continue;
      const mask = ipv4ToInt(a.netmask);
      if (mask === undefined) continue;
      let bits = 0;
      for (let m = mask; bits < 32 && (m & 0x80000000) !== 0; m = (m << 1) >>> 0) bits++;
      const range = normalizeCidr(`${a.address}/${bits}`);
      if (range) out.push(range);
    }
  }
  return out;
}

/** What onBridges needs of an engine's network (dockerode's NetworkInspectInfo has it). */
export interface EngineNetwork {
  readonly Id: string;
  readonly Driver: string;
  readonly Options?: Readonly<Record<string, string>> | null;
  readonly IPAM?: { readonly Config?: ReadonlyArray<{ readonly Subnet?: string }> | null } | null;
}

/**
 * Whether these interfaces are the engine's host's (this process is in the
 * engine's network namespace, where rules on its bridges apply): some bridge
 * network's interface (its bridge name option, else Docker's br-<id>) is
 * among them, with an address in the network's subnet. The interface is
 * what tells: the default bridge's IPAM names no gateway.
 */
export function onBridges(networks: readonly EngineNetwork[], interfaces: Readonly<Record<string, readonly InterfaceAddress[] | undefined>>): boolean {
  return networks.some((n) => {
    if (n.Driver !== 'bridge') return false;
    const name = n.Options?.['com.docker.network.bridge.name'] ?? `br-${n.Id.slice(0, 12)}`;
    const subnets = (n.IPAM?.Config ?? []).map((c) => c.Subnet ?? '');
    return (interfaces[name] ?? []).some((a) => subnets.some((sub) => inCidr(a.address, sub)));
  });
}

/**
 * What functions may not reach beyond this host: with `spec.defaults`,
 * link-local addresses, the networks of this host's interfaces and every
 * IPv4 subnet the engine knows (its bridges, overlays); and the operator's
 * ranges.
 */
export function blockList(spec: BlockSpec, hostNets: readonly string[], engineSubnets: readonly string[]): string[] {
  return compactCidrs([...(spec.defaults ? [LINK_LOCAL, ...hostNets, ...engineSubnets] : []), ...spec.cidrs]);
}

/** The IPv4 nameservers of a resolv.conf, loopback ones left out (containers cannot reach this host's loopback). */
export function nameservers(resolvConf: string): string[] {
  const out: string[] = [];
  for (const line of resolvConf.split('\n')) {
    const m = /^\s*nameserver\s+(\S+)/.exec(line);
    const ns = m?.[1];
    if (ns && ipv4ToInt(ns) !== undefined && !ns.startsWith('127.') && !out.includes(ns)) out.push(ns);
  }
  return out;
}

/** The network fnts makes for functions unless told otherwise (FNTS_FUNCTION_NETWORK_NAME). */
export const DEFAULT_NETWORK = 'fnts-functions';

/**
 * The bridge interface of network `name`: the rules match on it, so it is
 * fixed (com.docker.network.bridge.name) instead of Docker's br-<id>.
 * `fnts0` for the default network; another name gets a hash of it, so that
 * two fnts networks never share one (interface names are at most 15 bytes).
 */
export function bridgeName(name: string): string {
  return name === DEFAULT_NETWORK ? 'fnts0' : `fnts-${createHash('sha256').update(name).digest('hex').slice(0, 10)}`;
}

/** The two chains of the network whose id is `networkId`. */
export function fenceChains(networkId: string): { readonly input: string; readonly forward: string } {
  const id = networkId.slice(0, 12);
  return { input: `FNTS-IN-${id}`, forward: `FNTS-FWD-${id}` };
}

/** A fence chain's name: its kind and network id (12 hex digits). */
const CHAIN = /^FNTS-(IN|FWD)-([0-9a-f]{12})$/;

/** The comment every fence rule carries: `iptables -S | grep fnts` finds them all. */
const COMMENT = {
  answers: 'fnts: answers to this host',
  dns: 'fnts: DNS to the host nameservers',
  host: 'fnts: functions may not reach this host',
  peers: 'fnts: functions may not reach other functions',
  blocked: 'fnts: blocked range',
  forwarded: 'fnts: blocked range, before a port forward',
  allowed: 'fnts: allowed',
};

export interface Fence {
  /** The network's name (for the jump rules' comment), its id and its bridge interface. */
  readonly network: string;
  readonly networkId: string;
  readonly bridge: string;
  /** Nameservers that stay reachable on port 53. */
  readonly nameservers: readonly string[];
  /** Ranges functions may not reach. */
  readonly blocked: readonly string[];
}

/** The jump into a chain from INPUT or DOCKER-USER, as `iptables -S` prints it (without the leading `-A <chain>`). */
function jump(f: Fence, chain: string): string {
  return `-i ${f.bridge} -m comment --comment "fnts: functions of network ${f.network}" -j ${chain}`;
}

/**
 * The rules of `f`, in iptables-restore's form for `--noflush`: both chains
 * are declared (made, or emptied when they exist) and filled in one
 * transaction, so nobody ever sees half a fence; `jumps` says which of the
 * two jumps to insert (those missing: inserted at the top, before Docker's
 * own and any ACCEPT).
 */
export function fenceRestore(f: Fence, jumps: { readonly input: boolean; readonly forward: boolean }): string {
  const { input, forward } = fenceChains(f.networkId);
  const reject = '-j REJECT --reject-with icmp-admin-prohibited';
  const lines = ['*filter', `:${input} - [0:0]`, `:${forward} - [0:0]`];
  lines.push(`-A ${input} -m conntrack --ctstate RELATED,ESTABLISHED -m comment --comment "${COMMENT.answers}" -j RETURN`);
  for (const chain of [input, forward]) {
    for (const ns of f.nameservers) {
      for (const proto of ['udp', 'tcp']) lines.push(`-A ${chain} -d ${ns}/32 -p ${proto} -m ${proto} --dport 53 -m comment --comment "${COMMENT.dns}" -j RETURN`);
    }
  }
  lines.push(`-A ${input} -m comment --comment "${COMMENT.host}" ${reject}`);
  lines.push(`-A ${forward} -o ${f.bridge} -m comment --comment "${COMMENT.peers}" ${reject}`);
  for (const cidr of f.blocked) lines.push(`-A ${forward} -d ${cidr} -m comment --comment "${COMMENT.blocked}" ${reject}`);
  for (const cidr of f.blocked) lines.push(`-A ${forward} -m conntrack --ctorigdst ${cidr} -m comment --comment "${COMMENT.forwarded}" ${reject}`);
  lines.push(`-A ${forward} -m comment --comment "${COMMENT.allowed}" -j RETURN`);
  if (jumps.input) lines.push(`-I INPUT 1 ${jump(f, input)}`);
  if (jumps.forward) lines.push(`-I DOCKER-USER 1 ${jump(f, forward)}`);
  lines.push('COMMIT', '');
  return lines.join('\n');
}

/** The filter table as `iptables -S` prints it: each chain's rules (without `-A <chain> `), and which chains exist. */
export interface RuleSnapshot {
  readonly chains: ReadonlyMap<string, readonly string[]>;
}

export function parseRules(text: string): RuleSnapshot {
  const chains = new Map<string, string[]>();
  for (const line of text.split('\n')) {
    const m = /^-([NPA]) (\S+)(?: (.*))?$/.exec(line.trim());
    if (!m) continue;
    const [, op, chain, rest] = m;
    if (!chains.has(chain!)) chains.set(chain!, []);
    if (op === 'A') chains.get(chain!)!.push(rest ?? '');
  }
  return { chains };
}

/** What of `f` is in place: its chains, its jumps, and which of its ranges the forward chain already blocks. */
export function fenceState(snap: RuleSnapshot, f: Pick<Fence, 'networkId'>): { input: boolean; forward: boolean; jumpIn: boolean; jumpFwd: boolean; blocked: string[] } {
  const { input, forward } = fenceChains(f.networkId);
  const jumpsTo = (from: string, chain: string): boolean => (snap.chains.get(from) ?? []).some((r) => r.endsWith(` -j ${chain}`));
  return {
    input: (snap.chains.get(input)?.length ?? 0) > 0,
    forward: (snap.chains.get(forward)?.length ?? 0) > 0,
    jumpIn: jumpsTo('INPUT', input),
    jumpFwd: jumpsTo('DOCKER-USER', forward),
    blocked: blockedIn(snap.chains.get(forward) ?? []),
  };
}

/** The ranges a forward chain's rules reject (those fenceRestore wrote). */
function blockedIn(rules: readonly string[]): string[] {
  const out: string[] = [];
  for (const r of rules) {
    const m = /^-d (\S+) .*--comment "?fnts: blocked range"? .*-j REJECT/.exec(r);
    if (m) out.push(m[1]!);
  }
  return out;
}

/**
 * iptables-restore input (`--noflush`) that removes the fences of the
 * networks `doomed` (ids, or 12-hex prefixes): their jumps, then their
 * chains. Empty when the snapshot holds none of them.
 */
export function removalRestore(snap: RuleSnapshot, doomed: (id12: string) => boolean): string {
  const chains = [...snap.chains.keys()].filter((c) => {
    const m = CHAIN.exec(c);
    return m !== null && doomed(m[2]!);
  });
  if (chains.length === 0) return '';
  const lines = ['*filter'];
  for (const from of ['INPUT', 'DOCKER-USER']) {
    for (const r of snap.chains.get(from) ?? []) if (chains.some((c) => r.endsWith(` -j ${c}`))) lines.push(`-D ${from} ${r}`);
  }
  for (const c of chains) lines.push(`-F ${c}`);
  for (const c of chains) lines.push(`-X ${c}`);
  lines.push('COMMIT', '');
  return lines.join('\n');
}

/** The network ids (12 hex digits) that have fence chains in the snapshot. */
export function fencedIds(snap: RuleSnapshot): Set<string> {
  const out = new Set<string>();
  for (const c of snap.chains.keys()) {
    const m = CHAIN.exec(c);
    if (m) out.add(m[2]!);
  }
  return out;
}

/**
 * The chain where servers using a functions' network on this host say so,
 * one rule each (never jumped to: it only holds their names). The last one
 * to stop removes the network: see network.ts.
 */
export const USERS_CHAIN = 'FNTS-USERS';

/**
 * The servers the snapshot lists as users of `network`, with their rules:
 * each a comment `fnts: <network> used by <instance> <server>`, the
 * process's identity (host/pid/start) and one of its servers (a process
 * may run several, as tests do).
 */
export function usersOf(snap: RuleSnapshot, network: string): Array<{ readonly instance: string; readonly server: string; readonly rule: string }> {
  const out: Array<{ instance: string; server: string; rule: string }> = [];
  for (const rule of snap.chains.get(USERS_CHAIN) ?? []) {
    const m = /--comment "?fnts: (\S+) used by ([^"\s]+)(?: ([^"\s]+))?"?$/.exec(rule);
    if (m && m[1] === network) out.push({ instance: m[2]!, server: m[3] ?? '', rule });
  }
  return out;
}
