/**
 * Preloaded into every test process (vitest.config.ts execArgv), so that
 * the worker threads fnts starts (the SQLite record writer, the span
 * exporter) run from src/ in tests, as they run from dist/ in production,
 * with the same `new Worker(new URL('./x-worker.js', import.meta.url))`.
 *
 * Vitest runs src/ through its own transform, but a worker thread is a
 * fresh Node instance that loads its entry with Node's own loader, which
 * knows no TypeScript (Node 20). Worker threads inherit the process's
 * execArgv, so this file runs again in each of them, and there it installs
 * the loader hooks of ts-hooks.mjs. The test process's own main thread is
 * left alone (vitest loads its modules).
 *
 * Plain JavaScript: it runs before any TypeScript can be loaded.
 */
import { register } from 'node:module';
import { isMainThread } from 'node:worker_threads';

if (!isMainThread) register('./ts-hooks.mjs', import.meta.url);
