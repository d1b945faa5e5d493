/**
 * Node module hooks (registered in worker threads by worker-threads.mjs)
 * that load src/'s TypeScript: `./x.js` resolves to the `x.ts` beside it
 * when there is no `x.js` (NodeNext imports name the compiled file), and a
 * `.ts` file is compiled by esbuild (types stripped, nothing else changed).
 *
 * Why not tsx (the benches' runner, which does this): on Node 20 it
 * registers itself on the main thread only, and loaded by hand in a thread
 * it costs about 0.3 s per thread start (it loads itself and esbuild in the
 * thread and again in its hooks thread): the SQLite tests, which start a
 * writer thread per database, went from 2 s to 13 s. These hooks load
 * esbuild only for a file not compiled before: compiled files are kept in
 * the temporary folder by their path and content, so a thread start costs
 * about 50 ms more than plain JavaScript's.
 *
 * Why not dist/ (compiled by the test setup anyway): a run without that
 * setup would test whatever dist/ held, not the source under test.
 */
import { createHash } from 'node:crypto';
import { mkdirSync, readFileSync, renameSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';

const CACHE = join(tmpdir(), 'fnts-test-ts');
/** esbuild as tsx (a dev dependency) depends on it. */
const ESBUILD = pathToFileURL(createRequire(createRequire(import.meta.url).resolve('tsx/package.json')).resolve('esbuild')).href;
let esbuild;

export async function resolve(specifier, context, next) {
  try {
    return await next(specifier, context);
  } catch (err) {
    if (err?.code !== 'ERR_MODULE_NOT_FOUND' || !specifier.endsWith('.js')) throw err;
    return next(`${specifier.slice(0, -3)}.ts`, context);
  }
}

export async function load(url, context, next) {
  if (!url.startsWith('file:') || !url.endsWith('.ts')) return next(url, context);
  const path = fileURLToPath(url);
  const source = readFileSync(path, 'utf8');
  const compiled = join(CACHE, `${createHash('sha256').update(path).update('\0').update(source).digest('hex')}.js`);
  try {
    return { format: 'module', source: readFileSync(compiled, 'utf8'), shortCircuit: true };
  } catch {
    // Not compiled yet.
  }
  esbuild ??= await import(ESBUILD);
  const { code } = await esbuild.transform(source, { loader: 'ts', format: 'esm', target: 'node20', sourcefile: path, sourcemap: 'inline' });
  mkdirSync(CACHE, { recursive: true });
  // Written aside and renamed: a thread reading it meanwhile sees all of it or nothing.
  const partial = `${compiled}.${process.pid}.${Math.random().toString(36).slice(2)}`;
  writeFileSync(partial, code);
  renameSync(partial, compiled);
  return { format: 'module', source: code, shortCircuit: true };
}
