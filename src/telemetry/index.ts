/**
 * telemetry/ — what operators see: Prometheus metrics, traces and health.
 */
export { Metrics } from './metrics.js';
export type { MetricsOptions } from './metrics.js';
export { startTracing } from './tracing.js';
export type { Tracing } from './tracing.js';
