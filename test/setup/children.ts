/**
 * Runs in every test worker: after each test file, any fnts server process
 * a test started and did not stop (it failed half-way) is stopped, so no
 * server outlives its test holding a port and containers.
 */
import { afterAll } from 'vitest';
import { stopLeftoverServers } from '../support/process.js';

afterAll(async () => {
  await stopLeftoverServers();
});
