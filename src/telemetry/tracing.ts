/**
 * Tracing: on when an OTLP/HTTP endpoint is set (the standard
 * OTEL_EXPORTER_OTLP_ENDPOINT or OTEL_EXPORTER_OTLP_TRACES_ENDPOINT), off
 * otherwise, and then it costs nothing: no recorder, no spans.
 *
 * Nothing is registered process-wide: the agent is handed the recorder
 * (agent/spans.ts), which asks the standard sampler (OTEL_TRACES_SAMPLER)
 * on the call path and exports spans from a thread of its own
 * (span-export.ts).
 */
import { SpanKind, type Context } from '@opentelemetry/api';
import { AlwaysOffSampler, AlwaysOnSampler, ParentBasedSampler, SamplingDecision, TraceIdRatioBasedSampler, type Sampler } from '@opentelemetry/sdk-trace-base';
import type { Logger } from 'pino';
import type { SpanRecord, SpanRecorder } from '../agent/index.js';
import type { OtlpProtocol, TraceSampler } from '../config/index.js';
import { SpanExport } from './span-export.js';

export interface Tracing {
  readonly recorder: SpanRecorder;
  /** Sends the spans still buffered and stops. Never rejects. */
  shutdown(): Promise<void>;
}

/** The standard samplers, as OTEL_TRACES_SAMPLER names them. */
function sampler(kind: TraceSampler, ratio: number): Sampler {
  const root = kind.endsWith('always_on') ? new AlwaysOnSampler() : kind.endsWith('always_off') ? new AlwaysOffSampler() : new TraceIdRatioBasedSampler(ratio);
  return kind.startsWith('parentbased_') ? new ParentBasedSampler({ root }) : root;
}

export function startTracing(o: { url: string; protocol: OtlpProtocol; serviceName: string; version: string; role: string; sampler: { kind: TraceSampler; ratio: number }; log: Logger }): Tracing {
  const decide = sampler(o.sampler.kind, o.sampler.ratio);
  const spans = new SpanExport({ url: o.url, protocol: o.protocol, version: o.version, log: o.log, resource: { 'service.name': o.serviceName, 'service.version': o.version, 'fnts.role': o.role } });
  return {
    recorder: {
      sampled: (parent: Context, traceId: string, name: string) => decide.shouldSample(parent, traceId, name, SpanKind.INTERNAL, {}, []).decision === SamplingDecision.RECORD_AND_SAMPLED,
      record: (r: SpanRecord) => spans.record(r),
    },
    shutdown: () => spans.shutdown(),
  };
}
