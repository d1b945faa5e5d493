/**
 * agent/ — the scheduler: resource tracker, slot queues, hot containers and
 * the call path from submit to answer.
 */
export { Agent, AgentClosedError } from './agent.js';
export { INSTANCE_LABEL, instanceAlive, OWNER_LABEL, selfInstance, TAG_LABEL } from './owner.js';
export type { AgentConfig, AgentOptions, AgentSnapshot, RunningCall } from './agent.js';
export { MAX_STAT_POINTS } from './trace.js';
export type { CallInfo, CallListener, CallOutcome, StartTimings } from './trace.js';
export { functionSpec } from './call.js';
export type { FunctionSpec } from './call.js';
export type { CallRequest, CallResponse, RawHeaders } from './protocol/call.js';
export {
  computeCapacity,
  MB,
  memoryHeadRoom,
  MemoryCpuTracker,
  readHost,
  ResourceUnavailableError,
} from './resource.js';
export type { Capacity, HostReadings, ResourceRequest, ResourceSnapshot, ResourceToken, ResourceTracker } from './resource.js';
export { needsContainer, seedNeedsContainer, slotKey, SlotQueue, SlotQueues } from './slots.js';
export type { SlotStats } from './slots.js';
