/**
 * This host's iptables (filter table), through its own programs: `iptables`
 * to read and for single changes, `iptables-restore --noflush` for changes
 * that must land together (a whole fence: one transaction). Both wait for
 * the xtables lock (-w) where the legacy backend has one, and are bounded
 * in time: a hung program must not hold a server's start or stop.
 */
import { execFile, spawn } from 'node:child_process';

/** How long one program may take. */
const PROGRAM_TIMEOUT_MS = 10_000;

export class IptablesError extends Error {
  override readonly name = 'IptablesError';
  constructor(
    message: string,
    /** ENOENT: the program is not installed; otherwise its exit code, when it ran. */
    readonly code: string | number | undefined,
    options?: { cause?: unknown },
  ) {
    super(message, options);
  }
}

/** What network.ts needs of iptables; tests of the fence run the real one. */
export interface Iptables {
  /** `iptables -w <args>`'s output; rejects with IptablesError saying what it printed. */
  run(args: readonly string[]): Promise<string>;
  /** Feeds `text` to `iptables-restore -w --noflush`: all of it applies, or none. */
  restore(text: string): Promise<void>;
}

export class HostIptables implements Iptables {
  constructor(
    private readonly program = 'iptables',
    private readonly restorer = 'iptables-restore',
  ) {}

  run(args: readonly string[]): Promise<string> {
    return new Promise((resolve, reject) => {
      execFile(this.program, ['-w', ...args], { timeout: PROGRAM_TIMEOUT_MS, encoding: 'utf8' }, (err, stdout, stderr) => {
        if (!err) return resolve(stdout);
        reject(failure(this.program, args.join(' '), err, stderr));
      });
    });
  }

  restore(text: string): Promise<void> {
    return new Promise((resolve, reject) => {
      const child = spawn(this.restorer, ['-w', '--noflush'], { stdio: ['pipe', 'ignore', 'pipe'], timeout: PROGRAM_TIMEOUT_MS });
      let stderr = '';
      child.stderr.on('data', (b: Buffer) => (stderr += b.toString()));
      // A program that is not there fails the write too: its 'error' says why.
      child.stdin.on('error', () => undefined);
      child.once('error', (err) => reject(failure(this.restorer, '--noflush', err, stderr)));
      child.once('close', (code, signal) => {
        if (code === 0) resolve();
        else reject(new IptablesError(`${this.restorer} failed (${signal ?? `exit ${code}`}): ${stderr.trim() || 'no message'}`, code ?? undefined));
      });
      child.stdin.end(text);
    });
  }
}

function failure(program: string, what: string, err: Error & { code?: string | number | null }, stderr: string): IptablesError {
  if (err.code === 'ENOENT') return new IptablesError(`${program} is not installed`, 'ENOENT', { cause: err });
  return new IptablesError(`${program} ${what} failed: ${stderr.trim() || err.message}`, err.code ?? undefined, { cause: err });
}
