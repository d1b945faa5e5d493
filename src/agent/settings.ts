/**
 * The agent's settings, declared once: the config's agent section as
 * compileConfig() made it (no copies or renames), plus this process's identity.
 */
import type { AgentSettings } from '../config/index.js';

export type AgentConfig = Pick<
  AgentSettings,
  | 'freezeIdleMs'
  | 'ejectIdleMs'
  | 'keepAlivePolicy'
  | 'keepAliveBinMs'
  | 'hotPollMs'
  | 'hotStartTimeoutMs'
  | 'maxResponseBytes'
  | 'maxLogBytes'
  | 'iofsPath'
  | 'owner'
  | 'containerTag'
  | 'nonBlockingResources'
  | 'launchPolicy'
  | 'statsIntervalMs'
> & {
  /** This process's identity (selfInstance()): see owner.ts. */
  readonly instance: string;
};
