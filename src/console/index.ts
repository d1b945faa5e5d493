export { registerConsole } from './console.js';
export type { ConsoleDeps } from './console.js';
export { SECURITY_HEADERS, wantsHtml } from './assets.js';
export { figuresBetween, quantileMs, readRegistry } from './figures.js';
export type { Figures, FnFigures, Reading } from './figures.js';
export { Pulse } from './pulse.js';
export type { HistoryPoint, PulseListener, PulseOptions } from './pulse.js';
export type { FleetNode, FleetRunner, PoolGroup } from './fleet.js';
export type { FleetReport, Summary } from './routes.js';
