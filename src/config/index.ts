export { compileConfig, ConfigError } from './config.js';
export type { AgentSettings, Config, LogLevel, NodeType } from './config.js';
