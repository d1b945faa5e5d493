export { compileConfig, ConfigError, isLoopbackHost } from './config.js';
export type {
  AgentSettings,
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
