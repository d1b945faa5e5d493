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
    expect(started.sort()).toEqual(['src/datastore/sql/sqlite-thread-worker.ts', 'src/telemetry/span-export-worker.ts']);
  });

  it("load the SQLite writer thread's programs from modules that export them under the name given", () => {
    const programs: string[] = [];
    for (const file of shipped()) {
      const text = readFileSync(file, 'utf8');
      for (const m of text.matchAll(/module: (import\.meta\.url|new URL\('(\.\/[\w.-]+)\.js', import\.meta\.url\)\.href), exported: '(\w+)'/g)) {
        const module = m[2] ? join(dirname(file), `${m[2]}.ts`) : file;
        expect(readFileSync(module, 'utf8'), `${relative(root, module)} exports ${m[3]}`).toMatch(new RegExp(`export function ${m[3]}\\(`));
        programs.push(`${relative(root, module)}#${m[3]}`);
      }
    }
    expect(programs.sort()).toEqual(['src/datastore/sql/sqlite-writer.ts#writerProgram', 'src/mq/sqlite-program.ts#queueProgram']);
  });
});
