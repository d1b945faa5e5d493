export { compileConfig, ConfigError } from './config.js';
export type { Config, LogLevel, NodeType } from './config.js';
