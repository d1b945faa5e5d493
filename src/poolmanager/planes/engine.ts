/**
 * The Docker engine the docker and swarm planes use (DOCKER_HOST), both for
 * themselves and for their runners: a runner starts its functions'
 * containers on an engine too, and must reach one where its socket folder
 * is (the same host).
 *
 *   unix:///path   the manager talks to that socket; each runner gets it
 *                  bind-mounted at /var/run/docker.sock (its own default).
 *                  The path must be the socket's path on the engine's host
 *                  (the manager on that host, or in a container that has
 *                  the socket mounted at the same path).
 *   tcp://host:port  the manager dials it; runners get DOCKER_HOST as is
 *                  (docker plane only), so it must be an address a
 *                  container reaches: a loopback address is refused. The
 *                  swarm plane refuses tcp:// (a task must use the engine
 *                  of the node it runs on, whose socket a tcp address does
 *                  not name), and both refuse TLS (DOCKER_TLS_VERIFY,
 *                  DOCKER_CERT_PATH: runners would need the client keys).
 *
 * Whoever holds the engine's socket (or its unauthenticated tcp port) holds
 * root on its host: runners get it because they start containers, and
 * nothing else does.
 */
import { isIP } from 'node:net';
import Docker from 'dockerode';
import type { EngineAddress } from '../../config/index.js';
import { isLoopbackHost } from '../../models/index.js';
import { ControlPlaneError } from '../control-plane.js';

/** Where a runner's Docker client looks when DOCKER_HOST is unset. */
const RUNNER_SOCKET = '/var/run/docker.sock';

/** The local engine's socket: what DOCKER_HOST unset means. */
export const DEFAULT_ENGINE: EngineAddress = Object.freeze({ kind: 'unix', path: RUNNER_SOCKET });

/** What a runner container needs to reach the engine: a bind mount (host path), or environment. */
export interface RunnerEngine {
  /** The engine socket's path on the host, mounted at /var/run/docker.sock; undefined: none. */
  readonly socket: string | undefined;
  readonly env: Readonly<Record<string, string>>;
}

export function describeEngine(engine: EngineAddress): string {
  switch (engine.kind) {
    case 'unix':
      return `unix://${engine.path}`;
    case 'tcp':
      return `tcp://${isIP(engine.host) === 6 ? `[${engine.host}]` : engine.host}:${engine.port}`;
    case 'other':
      return engine.url;
  }
}

/** The manager's own client of the engine. */
export function engineClient(engine: EngineAddress): Docker {
  switch (engine.kind) {
    case 'unix':
      return new Docker({ socketPath: engine.path });
    case 'tcp':
      return new Docker({ host: engine.host, port: engine.port, protocol: 'http' });
    case 'other':
      // runnerEngine() refuses these first.
      throw unusable(engine, 'use unix:///path/to/docker.sock or tcp://host:port');
  }
}

/** An address that names, inside a runner's container, that container itself: loopback, or every address of the machine. */
function isLoopback(host: string): boolean {
  return isLoopbackHost(host) || /^\[?(0\.0\.0\.0|::)\]?$/.test(host);
}

function unusable(engine: EngineAddress, what: string): ControlPlaneError {
  return new ControlPlaneError('invalid', `DOCKER_HOST=${describeEngine(engine)} cannot be given to runner containers: ${what}`);
}

/**
 * How runners of `plane` reach `engine`; throws ControlPlaneError (invalid)
 * naming what to set instead when they cannot.
 */
export function runnerEngine(engine: EngineAddress, plane: 'docker' | 'swarm'): RunnerEngine {
  switch (engine.kind) {
    case 'unix':
      return { socket: engine.path, env: {} };
    case 'tcp':
      if (engine.tls) throw unusable(engine, "with TLS (DOCKER_TLS_VERIFY, DOCKER_CERT_PATH) they would need the client keys; use the engine's unix socket (unix:///var/run/docker.sock)");
      if (plane === 'swarm')
        throw unusable(engine, "each swarm task must use the engine of its own node, whose socket a tcp address does not name; run the manager with the node's socket (unix:///var/run/docker.sock)");
      if (isLoopback(engine.host))
        throw unusable(
          engine,
          `${engine.host} is the manager's own loopback, which a container does not reach; use an address of the engine's host that containers reach (e.g. its docker0 address), or its unix socket`,
        );
      return { socket: undefined, env: { DOCKER_HOST: describeEngine(engine) } };
    case 'other':
      throw unusable(engine, 'the pool manager supports unix:///path/to/docker.sock and tcp://host:port');
  }
}
