/**
 * Whose containers are whose. Every container an agent starts carries:
 *
 *   fnts.owner     the server's data directory (config: a hash of the
 *                  canonical database location), stable across restarts
 *   fnts.instance  the process that started it: host, pid and the pid's
 *                  start time, so a reused pid is not mistaken for it
 *   fnts.tag       FN_CONTAINER_LABEL_TAG, when set
 *
 * At start an agent removes the containers of its owner whose instance is
 * dead (an earlier run that was killed), and leaves alone those of a live
 * instance: two servers on one data directory never remove each other's
 * containers. An instance on another host cannot be checked, so its
 * containers are left alone too.
 */
import { readFileSync } from 'node:fs';
import { hostname } from 'node:os';

export const OWNER_LABEL = 'fnts.owner';
export const INSTANCE_LABEL = 'fnts.instance';
export const TAG_LABEL = 'fnts.tag';

/** The start time of process `pid`, in clock ticks since boot (field 22 of /proc/<pid>/stat); '' when unreadable. */
function processStartTicks(pid: number | 'self'): string {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    // The command name (field 2) may hold spaces and parentheses: count from the last ')'.
    const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    return fields[19] ?? '';
  } catch {
    return '';
  }
}

/** This process's instance identity: `<host>/<pid>/<start ticks>`. */
export function selfInstance(): string {
  return `${hostname()}/${process.pid}/${processStartTicks('self')}`;
}

/**
 * Whether the process named by an instance identity still runs: true or
 * false on this host; undefined when it cannot be told (another host, or a
 * label this version does not read).
 */
export function instanceAlive(instance: string): boolean | undefined {
  const m = /^(.*)\/(\d+)\/(\d*)$/.exec(instance);
  if (!m || m[1] !== hostname()) return undefined;
  const pid = Number(m[2]);
  if (pid === process.pid) return m[3] === processStartTicks('self');
  const started = processStartTicks(pid);
  if (started !== '') return m[3] === '' || started === m[3];
  try {
    process.kill(pid, 0);
    // Alive, but /proc cannot confirm it is the same process: assume it is.
    return true;
  } catch (err) {
    return (err as NodeJS.ErrnoException).code === 'EPERM';
  }
}
