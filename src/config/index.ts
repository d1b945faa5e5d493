export { compileConfig, ConfigError } from './config.js';
export type { AgentSettings, Config, LogFormat, LogLevel, NodeType, TraceSampler } from './config.js';
