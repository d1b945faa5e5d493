/**
 * agent/ — the local Invoker: resource tracker, per-slot-key pools, hot
 * launcher, evictor, cold path and the call path from invoke to answer;
 * fns' secrets as files in their containers.
 */
export { Agent } from './agent.js';
export { AsyncWorkers, retryDelayMs } from './async.js';
export type { AsyncWorkersOptions } from './async.js';
export type { AgentOptions, AgentSnapshot } from './agent.js';
export type { AgentConfig } from './settings.js';
export { ManualClock, realClock } from './clock.js';
export type { Clock, Timer } from './clock.js';
export type { Invoker, RunningCall } from '../call/index.js';
export { INSTANCE_LABEL, instanceAlive, OWNER_LABEL, selfInstance, TAG_LABEL } from './owner.js';
export { MAX_STAT_POINTS } from './trace.js';
export type { CallListener, StartTimings } from './trace.js';
export { ContainerStates } from './events.js';
export { CallSpans } from './spans.js';
export type { CallSpanRecord, SpanRecord, SpanRecorder, StartSpanRecord } from './spans.js';
export type { ContainerListener, ContainerRef, ContainerState, PrewarmResult } from './events.js';
export { functionSpec } from './spec.js';
export { serverBusy, shuttingDown } from './pool.js';
export type { FunctionSpec } from './spec.js';
export type { RetireReason } from './hot.js';
export { sameName, withoutHeaders, withoutHopHeaders } from './protocol/call.js';
export type { CallBody, CallRequest, CallResponse, RawHeaders } from './protocol/call.js';
export { computeCapacity, MB, memoryHeadRoom, MemoryCpuTracker, readHost, ResourceUnavailableError } from './resource.js';
export type { Capacity, HostReadings, ResourceRequest, ResourceSnapshot, ResourceToken, ResourceTracker } from './resource.js';
export { needsContainer, seedNeedsContainer, slotKey, SlotQueue } from './slots.js';
export type { SlotStats } from './slots.js';
export { plainSocketDirs, socketDirs, SOCKET_TMPFS_BYTES } from './iofs.js';
export type { IofsTmpfsSetting, SocketDirs } from './iofs.js';
export { plainSecretFolders, secretFolders, SECRETS_PATH } from './secrets.js';
export type { AgentSecrets, SecretFolders, SecretSource } from './secrets.js';
export { FixedKeepAlive, HistogramKeepAlive, IdleHistogram, keepAlivePolicy } from './keepalive.js';
export type { HistogramSnapshot, KeepAliveDecision, KeepAlivePolicy, KeepAlivePolicyName } from './keepalive.js';
export { FLUSH_MS, HistogramPersistence } from './keepalive-store.js';
export type { HistogramStore, StoredHistogram } from './keepalive-store.js';
