/**
 * lb/ — the LB's Invoker: runners over Fn's runner protocol, runner pools
 * (static, or managed by a pool manager), placers (naive, ch, wait), and
 * lookups from the API node.
 */
export { RunnerClient } from '../rpc/index.js';
export type { Attempt, RunnerClientOptions } from '../rpc/index.js';
export { RemoteInvokeGuard } from './invoke-auth.js';
export { ApiChangeWatch } from './changes.js';
export { LbAgent } from './lb-agent.js';
export type { LbAgentOptions, PlacementListener } from './lb-agent.js';
export { RemoteLookup } from './lookup.js';
export { PoolManagerClient } from './npm-client.js';
export type { CapacityAdvertisement, CapacitySnapshot, PoolManagerApi } from './npm-client.js';
export { ManagedPool, Runner, StaticPool } from './pool.js';
export type { ManagedPoolOptions, RunnerConnection, RunnerPool } from './pool.js';
export { RemoteCallStore } from './records.js';
export { RemoteSecrets } from './secrets.js';
export type { FnSecrets, RemoteSecretsOptions } from './secrets.js';
export type { RemoteLookupOptions } from './lookup.js';
export { PLACER_NAMES } from './placer.js';
export type { AttemptReport, Placer, PlacerName, RunnerView } from './placer.js';
export { createPlacer } from './placers.js';
export { runnersCheck } from './ready.js';
