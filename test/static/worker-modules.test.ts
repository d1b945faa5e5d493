/**
 * Code that runs in a worker thread is a real module that the compiler and
 * the tests see, never a program in a string (CONVENTIONS: "Generated
 * where a schema exists"): src/ evaluates no source text, and every worker
 * thread it starts is a module of its own beside its starter, compiled by
 * the build like any other.
 */
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { dirname, join, relative } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';

const root = join(dirname(fileURLToPath(import.meta.url)), '..', '..');
const src = join(root, 'src');

/** src/'s TypeScript files that ship (tests and contract suites are not built). */
function shipped(dir: string = src): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((e) => {
    const path = join(dir, e.name);
    if (e.isDirectory()) return shipped(path);
    return e.name.endsWith('.ts') && !e.name.endsWith('.test.ts') && !e.name.endsWith('.contract.ts') ? [path] : [];
  });
}

describe('worker threads', () => {
  // (A Redis EVAL is a member call, and not ours to run: it is not matched.)
  it('run no program from a string', () => {
    const offenders = shipped().filter((file) => /new Function\s*\(|\beval\s*:\s*true|(?<![.\w])eval\s*\(/.test(readFileSync(file, 'utf8')));
    expect(offenders.map((f) => relative(root, f))).toEqual([]);
  });

  it('are modules of their own, beside the module that starts them', () => {
    const started: string[] = [];
    for (const file of shipped()) {
      const text = readFileSync(file, 'utf8');
      for (const m of text.matchAll(/new Worker\((new URL\([^)]*\)|[^,)]*)/g)) {
        const url = /^new URL\('(\.\/[\w.-]+)\.js', import\.meta\.url\)$/.exec(m[1]!.trim());
        expect(url, `${relative(root, file)}: new Worker(${m[1]})`).not.toBeNull();
        const module = join(dirname(file), `${url![1]}.ts`);
        expect(existsSync(module), relative(root, module)).toBe(true);
        started.push(relative(root, module));
      }
    }
    expect(started.sort()).toEqual(['src/datastore/sql/sqlite-writer-worker.ts', 'src/telemetry/span-export-worker.ts']);
  });
});
