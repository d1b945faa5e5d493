/**
 * Tracing: on when an OTLP/HTTP endpoint is set (the standard
 * OTEL_EXPORTER_OTLP_ENDPOINT or OTEL_EXPORTER_OTLP_TRACES_ENDPOINT), off
 * otherwise, and then it costs nothing: no provider, no spans.
 *
 * The provider is this server's own rather than registered process-wide:
 * the agent is handed its tracer (agent/spans.ts), and the W3C
 * propagation there is explicit too.
 */
import { OTLPTraceExporter } from '@opentelemetry/exporter-trace-otlp-http';
import { resourceFromAttributes } from '@opentelemetry/resources';
import { BasicTracerProvider, BatchSpanProcessor } from '@opentelemetry/sdk-trace-base';
import type { Tracer } from '@opentelemetry/api';

export interface Tracing {
  readonly tracer: Tracer;
  /** Sends the spans still buffered and stops. Never rejects. */
  shutdown(): Promise<void>;
}

export function startTracing(o: { url: string; serviceName: string; version: string; role: string }): Tracing {
  const provider = new BasicTracerProvider({
    resource: resourceFromAttributes({ 'service.name': o.serviceName, 'service.version': o.version, 'fnts.role': o.role }),
    // Batched off the call path: a slow or absent receiver never holds up a call.
    spanProcessors: [new BatchSpanProcessor(new OTLPTraceExporter({ url: o.url }), { scheduledDelayMillis: 1000 })],
  });
  return {
    tracer: provider.getTracer('fnts', o.version),
    shutdown: () => provider.shutdown().catch(() => undefined),
  };
}
