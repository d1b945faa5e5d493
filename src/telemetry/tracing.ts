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
import { AlwaysOffSampler, AlwaysOnSampler, BasicTracerProvider, BatchSpanProcessor, ParentBasedSampler, TraceIdRatioBasedSampler, type Sampler } from '@opentelemetry/sdk-trace-base';
import type { TraceSampler } from '../config/index.js';
import type { Tracer } from '@opentelemetry/api';

export interface Tracing {
  readonly tracer: Tracer;
  /** Sends the spans still buffered and stops. Never rejects. */
  shutdown(): Promise<void>;
}

/** The standard samplers, as OTEL_TRACES_SAMPLER names them. */
function sampler(kind: TraceSampler, ratio: number): Sampler {
  const root = kind.endsWith('always_on') ? new AlwaysOnSampler() : kind.endsWith('always_off') ? new AlwaysOffSampler() : new TraceIdRatioBasedSampler(ratio);
  return kind.startsWith('parentbased_') ? new ParentBasedSampler({ root }) : root;
}

export function startTracing(o: { url: string; serviceName: string; version: string; role: string; sampler: { kind: TraceSampler; ratio: number } }): Tracing {
  const provider = new BasicTracerProvider({
    sampler: sampler(o.sampler.kind, o.sampler.ratio),
    resource: resourceFromAttributes({ 'service.name': o.serviceName, 'service.version': o.version, 'fnts.role': o.role }),
    // Batched off the call path: a slow or absent receiver never holds up a call.
    spanProcessors: [new BatchSpanProcessor(new OTLPTraceExporter({ url: o.url }), { scheduledDelayMillis: 1000 })],
  });
  return {
    tracer: provider.getTracer('fnts', o.version),
    shutdown: () => provider.shutdown().catch(() => undefined),
  };
}
