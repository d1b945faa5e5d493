/**
 * The control plane a pool manager's settings name (FNTS_CONTROL_PLANE).
 */
import type { FleetTls, PoolSettings } from '../../config/index.js';
import { TAG_LABEL } from '../../models/index.js';
import type { ControlPlane } from '../control-plane.js';
import { DockerPlane } from './docker.js';
import { SwarmPlane } from './swarm.js';

export { DockerPlane, GROUP_LABEL, MANAGER_LABEL, PORT_LABEL, RUNNER_GRPC_PORT } from './docker.js';
export { describeEngine, runnerEngine } from './engine.js';
export type { RunnerEngine } from './engine.js';
export type { DockerPlaneOptions, RunnerTlsFiles } from './docker.js';
export type { KubernetesPlaneOptions } from './kubernetes.js';
export { SwarmPlane } from './swarm.js';
export type { SwarmPlaneOptions } from './swarm.js';

/**
 * `runnerEnv`: settings every runner gets (log level and format, the
 * container tag); `containerTag` also labels the runners themselves; `tls`:
 * the manager's mutual TLS files, which its runners serve with too (each
 * plane hands them over its own way); undefined: runners serve plaintext.
 * The Kubernetes client (some 800 modules) is loaded only by the plane that
 * uses it: every other node would carry it in memory for nothing.
 */
export async function createControlPlane(pool: PoolSettings, runnerEnv: Readonly<Record<string, string>>, containerTag: string | undefined, tls: FleetTls | undefined): Promise<ControlPlane> {
  const labels: Record<string, string> = containerTag ? { [TAG_LABEL]: containerTag } : {};
  switch (pool.controlPlane) {
    case 'docker':
      return new DockerPlane({
        engine: pool.engine,
        image: pool.runnerImage,
        manager: pool.name,
        iofsRoot: pool.iofsPath,
        runnerMemMb: pool.runnerMemMb,
        ...(pool.publishHost ? { publishHost: pool.publishHost } : {}),
        ...(pool.runnerPorts ? { portRange: pool.runnerPorts } : {}),
        runnerEnv,
        labels,
        tls,
      });
    case 'swarm':
      return new SwarmPlane({
        engine: pool.engine,
        image: pool.runnerImage,
        manager: pool.name,
        iofsRoot: pool.iofsPath,
        runnerMemMb: pool.runnerMemMb,
        runnerEnv,
        labels,
        tls,
        ...(pool.swarmNetwork ? { network: pool.swarmNetwork } : {}),
        ...(pool.publishHost ? { publishHost: pool.publishHost } : {}),
      });
    case 'kubernetes': {
      // config requires the API server's address for this plane.
      // compileConfig requires the Secret when the manager has TLS.
      const { KubernetesPlane } = await import('./kubernetes.js');
      return new KubernetesPlane({
        apiUrl: pool.k8sApiUrl,
        namespace: pool.k8sNamespace,
        image: pool.runnerImage,
        manager: pool.name,
        runnerMemMb: pool.runnerMemMb,
        runnerEnv,
        tlsSecret: tls ? pool.k8sTlsSecret : undefined,
      });
    }
  }
}
