export { compileConfig, ConfigError } from './config.js';
export type { AgentSettings, Config, ControlPlaneKind, DetachedSettings, LogFormat, LogLevel, FleetSettings, NodeType, OtlpProtocol, PlacerKind, PoolSettings, TraceSampler } from './config.js';
