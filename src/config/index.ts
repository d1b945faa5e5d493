export { compileConfig, ConfigError } from './config.js';
export type { AgentSettings, Config, LogLevel, NodeType, TraceSampler } from './config.js';
