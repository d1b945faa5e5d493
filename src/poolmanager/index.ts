/**
 * poolmanager/ — the pool manager (FN_NODE_TYPE=poolmanager): LBs advertise
 * the capacity each runner group needs, the manager scales the groups
 * through a control plane and answers their membership.
 */
export { CapacityBook } from './capacity.js';
export type { CapacityBookOptions } from './capacity.js';
export { checkGroup, ControlPlaneError, GROUP_NAME } from './control-plane.js';
export type { ControlPlane, RunnerInfo } from './control-plane.js';
export { PoolManager, RUNNER_STATES } from './manager.js';
export type { GroupView, ManagedRunner, PoolEvents, PoolManagerOptions, RunnerState } from './manager.js';
export { PoolMetrics } from './metrics.js';
export { plan } from './plan.js';
export type { Plan, PlanInput } from './plan.js';
export { conservative, forecast, forecastWith, FORECAST_TUNING, PREDICTOR_NAMES, PREDICTORS } from './predictors.js';
export type { DemandSample, ForecastTuning, Predictor, PredictorContext, PredictorName } from './predictors.js';
export type { CapacityNeeds, CapacitySnapshotListMsg, CapacitySnapshotMsg, LBGroupIdMsg, LBGroupMembershipMsg, PoolManagerClient, PoolManagerClientOptions, PoolRunnerMsg } from '../rpc/index.js';
export { PoolManagerServer } from './server.js';
export type { PoolManagerServerOptions } from './server.js';
export { RunnerStatus } from './status.js';
export type { StatusProbe } from './status.js';
