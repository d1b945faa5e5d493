/**
 * telemetry/ — what a process tells about itself: readiness checks for
 * health probes (metrics and tracing join here).
 */
export { CHECK_TIMEOUT_MS, Readiness } from './health.js';
export type { HealthCheck, ReadinessOptions, ReadinessReport } from './health.js';
