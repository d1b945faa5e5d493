export { compileConfig, ConfigError } from './config.js';
export type { AgentSettings, Config, LogFormat, LogLevel, FleetSettings, NodeType, PlacerKind, TraceSampler } from './config.js';
