import { fileURLToPath } from 'node:url';
import { defineConfig } from 'vitest/config';

export default defineConfig({
  test: {
    include: ['src/**/*.test.ts', 'test/**/*.test.ts'],
    pool: 'forks',
    // Worker threads started by src/ (SQLite writer, span export) load their .ts modules: see the file.
    execArgv: ['--import', fileURLToPath(new URL('./test/setup/worker-threads.mjs', import.meta.url))],
    testTimeout: 30_000,
    hookTimeout: 180_000,
    globalSetup: ['test/setup/global.ts'],
    // Any unhandled rejection or uncaught exception fails the run.
    setupFiles: ['test/setup/faults.ts', 'test/setup/children.ts'],
  },
});
