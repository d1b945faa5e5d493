export { compileConfig, ConfigError } from './config.js';
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
