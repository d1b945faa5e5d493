export { compileConfig, ConfigError, SECRET_KEY_BYTES, SecretKey } from './config.js';
export { DbUrlError, parseDbUrl, redactDbUrl } from './db-url.js';
export type { DbLocation, PgSslMode } from './db-url.js';
export type {
  AgentSettings,
  AuthSettings,
  Config,
  ControlPlaneKind,
  DetachedSettings,
  EngineAddress,
  PortRange,
  LogFormat,
  LogLevel,
  FleetSettings,
  FleetTls,
  NodeType,
  OtlpProtocol,
  PlacerKind,
  PoolSettings,
  TraceSampler,
} from './config.js';
