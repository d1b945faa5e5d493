import { describe, expect, it } from 'vitest';
import {
  blockList,
  bridgeName,
  compactCidrs,
  covers,
  fenceChains,
  fencedIds,
  fenceRestore,
  fenceState,
  hostNetworks,
  nameservers,
  normalizeCidr,
  onBridges,
  parseRules,
  removalRestore,
  usersOf,
} from './isolation.js';

const IFACES = {
  lo: [{ address: '127.0.0.1', netmask: '255.0.0.0', family: 'IPv4', internal: true }],
  eth0: [
    { address: '192.168.1.23', netmask: '255.255.255.0', family: 'IPv4', internal: false },
    { address: 'fe80::1', netmask: 'ffff:ffff:ffff:ffff::', family: 'IPv6', internal: false },
  ],
  docker0: [{ address: '172.17.0.1', netmask: '255.255.0.0', family: 'IPv4', internal: false }],
  wg0: [{ address: '10.8.0.7', netmask: '255.255.255.255', family: 4, internal: false }],
};

describe('the block list', () => {
  it('normalizes ranges: host bits cleared, a bare address as /32, anything else refused', () => {
    expect(normalizeCidr('10.1.2.3/8')).toBe('10.0.0.0/8');
    expect(normalizeCidr('192.168.7.9')).toBe('192.168.7.9/32');
    expect(normalizeCidr('0.0.0.0/0')).toBe('0.0.0.0/0');
    expect(normalizeCidr('10.0.0.0/33')).toBeUndefined();
    expect(normalizeCidr('256.0.0.0/8')).toBeUndefined();
    expect(normalizeCidr('fd00::/8')).toBeUndefined();
  });

  it("takes the host's own networks from its interfaces, loopback and IPv6 left out", () => {
    expect(hostNetworks(IFACES)).toEqual(['192.168.1.0/24', '172.17.0.0/16', '10.8.0.7/32']);
  });

  it("knows the engine's host by its bridges: one of them is an interface here, with an address in its network", () => {
    const bridge = { Id: 'a'.repeat(64), Driver: 'bridge', Options: { 'com.docker.network.bridge.name': 'docker0' }, IPAM: { Config: [{ Subnet: '172.17.0.0/16' }] } };
    const userDefined = { Id: '0123456789abcdef', Driver: 'bridge', Options: {}, IPAM: { Config: [{ Subnet: '172.20.0.0/16' }] } };
    expect(onBridges([bridge], IFACES)).toBe(true);
    // In a container: its own eth0 on the bridge's subnet, but no docker0.
    expect(onBridges([bridge], { eth0: [{ address: '172.17.0.5', netmask: '255.255.0.0', family: 'IPv4', internal: false }] })).toBe(false);
    expect(onBridges([userDefined], { 'br-0123456789ab': [{ address: '172.20.0.1', netmask: '255.255.0.0', family: 'IPv4', internal: false }] })).toBe(true);
    expect(onBridges([{ ...bridge, Driver: 'overlay' }], IFACES)).toBe(false);
  });

  it("by default blocks link-local, the host's networks and the engine's subnets; the operator's ranges add to them, or replace them without the word default", () => {
    const host = hostNetworks(IFACES);
    expect(blockList({ defaults: true, cidrs: [] }, host, ['172.17.0.0/16', '172.20.0.0/16'])).toEqual(['10.8.0.7/32', '169.254.0.0/16', '172.17.0.0/16', '172.20.0.0/16', '192.168.1.0/24']);
    // 10.0.0.0/8 holds the wireguard address: one rule covers both.
    expect(blockList({ defaults: true, cidrs: ['10.0.0.0/8'] }, host, [])).toEqual(['10.0.0.0/8', '169.254.0.0/16', '172.17.0.0/16', '192.168.1.0/24']);
    expect(blockList({ defaults: false, cidrs: ['169.254.169.254/32'] }, host, ['172.17.0.0/16'])).toEqual(['169.254.169.254/32']);
  });

  it('keeps a range once, and not when a wider one holds it', () => {
    expect(compactCidrs(['10.1.0.0/16', '10.0.0.0/8', '10.0.0.0/8', '172.16.5.4/12'])).toEqual(['10.0.0.0/8', '172.16.0.0/12']);
    expect(covers(['10.0.0.0/8'], '10.9.9.0/24')).toBe(true);
    expect(covers(['10.9.9.0/24'], '10.0.0.0/8')).toBe(false);
  });

  it("exempts the resolv.conf's nameservers but loopback ones (the engine forwards DNS to them from the containers)", () => {
    expect(nameservers('# generated\nnameserver 192.168.1.1\nnameserver 127.0.0.53\nnameserver 2001:db8::1\n  nameserver 10.0.0.2 \nsearch lan\nnameserver 192.168.1.1\n')).toEqual([
      '192.168.1.1',
      '10.0.0.2',
    ]);
  });

  it('names bridges within the 15 bytes of an interface name, one per network', () => {
    expect(bridgeName('fnts-functions')).toBe('fnts0');
    const other = bridgeName('fnts-it-abc');
    expect(other).toMatch(/^fnts-[0-9a-f]{10}$/);
    expect(bridgeName('fnts-it-abd')).not.toBe(other);
  });
});

describe('the rules', () => {
  const fence = { network: 'fnts-functions', networkId: 'f14828889e4b0123456789', bridge: 'fnts0', nameservers: ['192.168.1.1'], blocked: ['169.254.0.0/16', '192.168.1.0/24'] };
  const chains = fenceChains(fence.networkId);

  it('fence the host (INPUT) and the rest (DOCKER-USER) from the bridge, in one transaction, REJECTing rather than dropping', () => {
    expect(chains).toEqual({ input: 'FNTS-IN-f14828889e4b', forward: 'FNTS-FWD-f14828889e4b' });
    const text = fenceRestore(fence, { input: true, forward: false });
    const lines = text.trim().split('\n');
    expect(lines[0]).toBe('*filter');
    expect(lines.at(-1)).toBe('COMMIT');
    expect(lines).toContain(':FNTS-IN-f14828889e4b - [0:0]');
    expect(lines).toContain('-I INPUT 1 -i fnts0 -m comment --comment "fnts: functions of network fnts-functions" -j FNTS-IN-f14828889e4b');
    expect(lines.some((l) => l.startsWith('-I DOCKER-USER'))).toBe(false);
    const input = lines.filter((l) => l.startsWith('-A FNTS-IN-'));
    // Answers to this host's own connections, then DNS to the nameserver, then nothing else.
    expect(input[0]).toContain('--ctstate RELATED,ESTABLISHED');
    expect(input.slice(1, 3).every((l) => l.includes('-d 192.168.1.1/32') && l.includes('--dport 53') && l.endsWith('-j RETURN'))).toBe(true);
    expect(input.at(-1)).toMatch(/^-A FNTS-IN-\S+ -m comment --comment "fnts: functions may not reach this host" -j REJECT --reject-with icmp-admin-prohibited$/);
    const forward = lines.filter((l) => l.startsWith('-A FNTS-FWD-'));
    const firstReject = forward.findIndex((l) => l.includes('REJECT'));
    expect(forward.slice(0, firstReject).every((l) => l.includes('--dport 53'))).toBe(true);
    expect(forward[firstReject]).toContain('-o fnts0');
    expect(forward.filter((l) => l.includes('-d 192.168.1.0/24') || l.includes('--ctorigdst 192.168.1.0/24'))).toHaveLength(2);
    expect(forward.at(-1)).toContain('-j RETURN');
  });

  it('are found again in what iptables -S prints: chains, jumps, blocked ranges', () => {
    const printed = [
      '-P INPUT ACCEPT',
      '-N DOCKER-USER',
      `-N ${chains.forward}`,
      `-N ${chains.input}`,
      '-N FNTS-IN-aaaaaaaaaaaa',
      `-A INPUT -i fnts0 -m comment --comment "fnts: functions of network fnts-functions" -j ${chains.input}`,
      '-A INPUT -i fnts-1 -m comment --comment "fnts: functions of network other" -j FNTS-IN-aaaaaaaaaaaa',
      '-A DOCKER-USER -j RETURN',
      `-A ${chains.forward} -o fnts0 -m comment --comment "fnts: functions may not reach other functions" -j REJECT --reject-with icmp-admin-prohibited`,
      `-A ${chains.forward} -d 169.254.0.0/16 -m comment --comment "fnts: blocked range" -j REJECT --reject-with icmp-admin-prohibited`,
      `-A ${chains.forward} -m conntrack --ctorigdst 169.254.0.0/16 -m comment --comment "fnts: blocked range, before a port forward" -j REJECT --reject-with icmp-admin-prohibited`,
      `-A ${chains.input} -m comment --comment "fnts: functions may not reach this host" -j REJECT --reject-with icmp-admin-prohibited`,
      '-A FNTS-IN-aaaaaaaaaaaa -j REJECT --reject-with icmp-admin-prohibited',
      '-N FNTS-USERS',
      '-A FNTS-USERS -m comment --comment "fnts: fnts-functions used by vm/12/345 4f2a"',
      '-A FNTS-USERS -m comment --comment "fnts: other used by vm/13/346"',
      '-A FNTS-USERS -m comment --comment "fnts: fnts-functions used by vm/14/347"',
    ].join('\n');
    const snap = parseRules(printed);
    expect(fenceState(snap, fence)).toEqual({ input: true, forward: true, jumpIn: true, jumpFwd: false, blocked: ['169.254.0.0/16'] });
    expect([...fencedIds(snap)]).toEqual(['f14828889e4b', 'aaaaaaaaaaaa']);
    expect(usersOf(snap, 'fnts-functions')).toEqual([
      { instance: 'vm/12/345', server: '4f2a', rule: '-m comment --comment "fnts: fnts-functions used by vm/12/345 4f2a"' },
      { instance: 'vm/14/347', server: '', rule: '-m comment --comment "fnts: fnts-functions used by vm/14/347"' },
    ]);
    // The other network's fence goes whole: its jump, then its chain; ours stays.
    expect(
      removalRestore(snap, (id) => id === 'aaaaaaaaaaaa')
        .trim()
        .split('\n'),
    ).toEqual(['*filter', '-D INPUT -i fnts-1 -m comment --comment "fnts: functions of network other" -j FNTS-IN-aaaaaaaaaaaa', '-F FNTS-IN-aaaaaaaaaaaa', '-X FNTS-IN-aaaaaaaaaaaa', 'COMMIT']);
    expect(removalRestore(snap, () => false)).toBe('');
  });
});
