export { compileConfig, ConfigError, SECRET_KEY_BYTES, SecretKey } from './config.js';
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
  NodeType,
  OtlpProtocol,
  PlacerKind,
  PoolSettings,
  TraceSampler,
} from './config.js';
