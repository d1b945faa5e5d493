/**
 * agent/ — the scheduler: resource tracker, slot queues, hot containers and
 * the call path from submit to answer.
 */
export { Agent, AgentClosedError, OWNER_LABEL } from './agent.js';
export type { AgentConfig, AgentOptions, AgentSnapshot, CallInfo, CallListener, CallOutcome, RunningCall } from './agent.js';
export { functionSpec } from './call.js';
export type { FunctionSpec } from './call.js';
export type { CallRequest, CallResponse, RawHeaders } from './protocol/http-stream.js';
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
