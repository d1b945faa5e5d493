/**
 * The threads of the test process, as Linux shows them: what a worker
 * thread of fnts runs at, seen the way `top -H` would.
 */
import { readdirSync, readFileSync } from 'node:fs';

/** The nice value of each thread of this process (/proc/self/task/<tid>/stat, field 19). */
export function threadNiceValues(): number[] {
  const nice: number[] = [];
  for (const tid of readdirSync('/proc/self/task')) {
    let stat: string;
    try {
      stat = readFileSync(`/proc/self/task/${tid}/stat`, 'utf8');
    } catch {
      continue; // the thread ended meanwhile
    }
    // Fields after the command (which may hold spaces), from field 3 (state): nice is field 19.
    const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    nice.push(Number(fields[16]));
  }
  return nice;
}
