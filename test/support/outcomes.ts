/** Call outcomes for unit tests of what consumes them (records, workers). */
import type { CallOutcome } from '../../src/models/index.js';

/** A call `id` that succeeded with 200 after `execMs`. */
export function successOutcome(id: string, execMs = 1): CallOutcome {
  return { id, status: 'success', httpStatus: 200, errorUser: false, ran: true, createdAt: 'c', completedAt: 'd', timings: { wait_ms: 0, exec_ms: execMs }, stats: [] };
}
