/**
 * telemetry/ — what operators see: Prometheus metrics, traces, and readiness checks for health probes.
 */
export { CHECK_TIMEOUT_MS, Readiness } from './health.js';
export type { HealthCheck, ReadinessOptions, ReadinessReport } from './health.js';
export { Metrics } from './metrics.js';
export type { MetricsOptions } from './metrics.js';
export { startTracing } from './tracing.js';
export type { Tracing } from './tracing.js';
