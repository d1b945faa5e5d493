/**
 * time/ — deadlines on the process's real timers (deadline.ts): one shape
 * for every "do this when the time is up, unless the work is done first".
 * Below every other module: it imports none of them.
 */
export { Deadline, within } from './deadline.js';
export type { DeadlineOptions } from './deadline.js';
