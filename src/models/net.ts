/**
 * What a host name or address says about who can reach it: the one
 * loopback rule of every place that decides on it (the config's checks of
 * plaintext gRPC, the LB's runner client, the pool manager's engine
 * address).
 */
import { BlockList, isIP } from 'node:net';

/** Loopback addresses: 127.0.0.0/8 and ::1 (IPv4-mapped too). */
const LOOPBACK = new BlockList();
LOOPBACK.addSubnet('127.0.0.0', 8, 'ipv4');
LOOPBACK.addAddress('::1', 'ipv6');

/** Whether `host` binds (or is dialled) on this machine only: a loopback address, or localhost. Any other name counts as reachable. */
export function isLoopbackHost(host: string): boolean {
  const h = host.toLowerCase().replace(/^\[(.*)\]$/, '$1');
  if (h === 'localhost' || h.endsWith('.localhost')) return true;
  const family = isIP(h);
  return family !== 0 && LOOPBACK.check(h, family === 6 ? 'ipv6' : 'ipv4');
}
