/**
 * Runs in every test worker before its test files: any unhandled rejection
 * or uncaught exception fails the run, even one that surfaces between tests
 * (a promise a container fault left behind, a timer firing after its test).
 * Such a fault would end a real server; a suite that lets it pass proves
 * nothing about reliability.
 */
import { afterAll, afterEach } from 'vitest';

const KEY = Symbol.for('fnts.test.faults');
type Faults = { list: Array<{ kind: string; error: unknown }> };
const g = globalThis as unknown as Record<symbol, Faults | undefined>;

if (!g[KEY]) {
  const faults: Faults = { list: [] };
  g[KEY] = faults;
  process.on('unhandledRejection', (error) => faults.list.push({ kind: 'unhandled rejection', error }));
  process.on('uncaughtException', (error) => faults.list.push({ kind: 'uncaught exception', error }));
}

function check(): void {
  const faults = g[KEY]!;
  if (faults.list.length === 0) return;
  const found = faults.list.splice(0);
  const text = found.map((f) => `${f.kind}: ${f.error instanceof Error ? (f.error.stack ?? f.error.message) : String(f.error)}`).join('\n');
  throw new Error(`${found.length} fault(s) that would end a server:\n${text}`);
}

afterEach(check);
afterAll(check);
