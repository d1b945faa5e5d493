/**
 * The module map's rules (docs/architecture.md), checked on the code: the
 * import graph of src/ has no cycle, and its arrows point only the allowed
 * way between modules (the folders under src/).
 */
import { readdirSync, readFileSync } from 'node:fs';
import { dirname, join, relative, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';

const SRC = resolve(dirname(fileURLToPath(import.meta.url)), '..', '..', 'src');

function sources(dir: string): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((e) => {
    const p = join(dir, e.name);
    if (e.isDirectory()) return sources(p);
    return e.name.endsWith('.ts') && !e.name.endsWith('.test.ts') && !e.name.endsWith('.contract.ts') ? [p] : [];
  });
}

/** Each source file's relative imports (type-only ones included: they are arrows of the design too). */
function graph(): Map<string, string[]> {
  const out = new Map<string, string[]>();
  for (const file of sources(SRC)) {
    const text = readFileSync(file, 'utf8');
    const deps: string[] = [];
    for (const m of text.matchAll(/(?:^|\n)\s*(?:import|export)\s[^;]*?from\s+'(\.[^']+)'/g)) {
      deps.push(resolve(dirname(file), m[1]!).replace(/\.js$/, '.ts'));
    }
    out.set(file, deps);
  }
  return out;
}

const moduleOf = (file: string): string => relative(SRC, file).split('/')[0]!.replace(/\.ts$/, '');

/**
 * Which modules each module may import (besides itself). Lower layers never
 * import the roles or each other sideways; lb and runner share only call/,
 * rpc/ and models/ (and the agent's types where an LB or runner uses them: none).
 */
const ALLOWED: Record<string, readonly string[]> = {
  config: ['models'],
  models: [],
  time: [],
  call: ['models'],
  auth: ['models', 'datastore'],
  drivers: ['time', 'models'],
  datastore: ['time', 'models', 'config'],
  mq: ['time', 'models', 'datastore'],
  rpc: ['time', 'call', 'models'],
  agent: ['time', 'call', 'models', 'drivers', 'mq', 'config'],
  telemetry: ['time', 'agent', 'call', 'models', 'mq', 'config', 'datastore', 'drivers'],
  lb: ['time', 'auth', 'call', 'rpc', 'models', 'datastore', 'config', 'telemetry'],
  runner: ['time', 'call', 'rpc', 'models'],
  poolmanager: ['time', 'rpc', 'models', 'config'],
  console: ['time', 'auth', 'models', 'datastore', 'telemetry'],
  server: ['console', 'time', 'auth', 'call', 'models', 'datastore', 'mq', 'agent', 'drivers', 'telemetry', 'config'],
  roles: ['console', 'time', 'auth', 'agent', 'call', 'config', 'datastore', 'drivers', 'lb', 'models', 'mq', 'poolmanager', 'rpc', 'runner', 'server', 'telemetry'],
  cli: ['time', 'auth', 'roles', 'config', 'server'],
};

describe('the module map', () => {
  const g = graph();

  it('every module is known to the map', () => {
    const modules = new Set([...g.keys()].map(moduleOf));
    expect([...modules].filter((m) => !(m in ALLOWED))).toEqual([]);
  });

  it('arrows point only the allowed way between modules', () => {
    const wrong: string[] = [];
    for (const [file, deps] of g) {
      const from = moduleOf(file);
      for (const dep of deps) {
        const to = moduleOf(dep);
        if (to !== from && !ALLOWED[from]?.includes(to)) wrong.push(`${relative(SRC, file)} -> ${relative(SRC, dep)}`);
      }
    }
    expect(wrong).toEqual([]);
  });

  it('has no import cycle', () => {
    const cycles: string[] = [];
    const state = new Map<string, 'visiting' | 'done'>();
    const stack: string[] = [];
    const visit = (file: string): void => {
      state.set(file, 'visiting');
      stack.push(file);
      for (const dep of g.get(file) ?? []) {
        if (!g.has(dep)) continue;
        const s = state.get(dep);
        if (s === 'visiting') cycles.push([...stack.slice(stack.indexOf(dep)), dep].map((f) => relative(SRC, f)).join(' -> '));
        else if (s === undefined) visit(dep);
      }
      stack.pop();
      state.set(file, 'done');
    };
    for (const file of g.keys()) if (!state.has(file)) visit(file);
    expect(cycles).toEqual([]);
  });
});
