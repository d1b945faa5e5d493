import { fileURLToPath } from 'node:url';
import { defineConfig } from 'vitest/config';

/**
 * Three projects, `npm test` runs them all:
 * - unit: the logic, beside the code (src/**), the static checks of the
 *   tree (test/static) and the keep-alive simulator (bench/): no Docker, no
 *   build, seconds (`npm run test:unit`);
 * - docker: one node against the real Docker engine and real function
 *   images (test/ but the fleet): the global setup builds dist/ and the images;
 * - fleet: several processes and roles (LB, runners, pool manager, Fn's own
 *   programs from ../shared/bin);
 * - db: the datastore on real Postgres and MariaDB servers (started by the
 *   tests from Debian's packages) and SQLite, and nodes sharing one;
 * - browser: the console (/ui) in Debian's chromium, driven by playwright-core,
 *   against a real server with real functions;
 * - timing: files whose workload is real time (TIMING below): one at a
 *   time, alone, after the rest.
 *
 * Two files at a time (the machine's 2 cores): most of the suite waits on
 * Docker and on servers it started, and one at a time took 880 s where two
 * take ~600.
 */
/**
 * Files whose workload is real time, run one at a time with nothing beside
 * them: calls on a cadence (keep-alive), and a burst of 200 cold calls
 * against their deadlines with the machine's container starts (beside
 * another file, once a call of the burst answered neither 200 nor 503).
 */
const TIMING = ['test/agent/keepalive.test.ts', 'test/agent/failures.test.ts'];

export default defineConfig({
  test: {
    pool: 'forks',
    maxWorkers: 2,
    // Worker threads started by src/ (SQLite writer, span export) load their .ts modules: see the file.
    execArgv: ['--import', fileURLToPath(new URL('./test/setup/worker-threads.mjs', import.meta.url))],
    testTimeout: 30_000,
    hookTimeout: 180_000,
    // Any unhandled rejection or uncaught exception fails the run.
    setupFiles: ['test/setup/faults.ts', 'test/setup/children.ts'],
    projects: [
      // Unit files share their workers' module cache (isolate: false): a fresh fork per file cost more than the tests (39 s -> 27 s on 2 cores).
      { extends: true, test: { name: 'unit', include: ['src/**/*.test.ts', 'test/static/**/*.test.ts', 'bench/**/*.test.mts'], isolate: false } },
      {
        extends: true,
        test: {
          name: 'docker',
          include: ['test/**/*.test.ts'],
          exclude: ['test/static/**', 'test/fleet/**', 'test/poolmanager/**', 'test/db/**', 'test/browser/**', ...TIMING],
          globalSetup: ['test/setup/global.ts'],
        },
      },
      { extends: true, test: { name: 'timing', include: TIMING, globalSetup: ['test/setup/global.ts'], maxWorkers: 1, sequence: { groupOrder: 1 } } },
      { extends: true, test: { name: 'browser', include: ['test/browser/**/*.test.ts'], globalSetup: ['test/setup/global.ts'] } },
      { extends: true, test: { name: 'db', include: ['test/db/**/*.test.ts'], globalSetup: ['test/setup/global.ts'] } },
      { extends: true, test: { name: 'fleet', include: ['test/fleet/**/*.test.ts', 'test/poolmanager/**/*.test.ts'], globalSetup: ['test/setup/global.ts'] } },
    ],
  },
});
