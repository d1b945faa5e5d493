/**
 * FN_NODE_TYPE=poolmanager: LBs advertise what each runner group needs
 * (NodePoolScaler) and ask for its runners (RunnerManager) on FN_GRPC_PORT
 * (9191); the groups are scaled through FNTS_CONTROL_PLANE. It keeps no
 * database and no queue.
 */
import { CapacityBook, PoolManager, PoolManagerServer, PoolMetrics, PREDICTORS, RunnerStatus } from '../poolmanager/index.js';
import { createControlPlane } from '../poolmanager/planes/index.js';
import { fleetTls } from './common.js';
import type { Role } from './parts.js';

export const poolmanager: Role = async ({ config, logger, metrics }, made) => {
  const { pool } = config;
  const log = logger.child({ module: 'poolmanager' });
  // Runners get the settings that make them part of this fleet.
  const runnerEnv: Record<string, string> = {
    FN_LOG_LEVEL: config.logLevel,
    FN_LOG_FORMAT: config.logFormat,
    ...(config.agent.containerTag ? { FN_CONTAINER_LABEL_TAG: config.agent.containerTag } : {}),
  };
  const plane = createControlPlane(pool, runnerEnv, config.agent.containerTag);
  const book = new CapacityBook({ ttlMs: pool.requirementTtlMs });
  const tls = fleetTls(config);
  const status = new RunnerStatus(tls);
  const events = metrics ? new PoolMetrics(metrics.registry, book) : undefined;
  const manager = new PoolManager({
    plane,
    book,
    predictor: PREDICTORS[pool.predictor],
    probe: status.probe,
    log,
    runnerMemMb: pool.runnerMemMb,
    minRunners: pool.minRunners,
    maxRunners: pool.maxRunners,
    maxProvisionPerTick: pool.maxProvisionPerTick,
    tickMs: pool.tickMs,
    leadMs: pool.runnerStartMs,
    drainGraceMs: pool.drainGraceMs,
    maxDrainMs: pool.maxDrainMs,
    startTimeoutMs: pool.startTimeoutMs,
    ...(events ? { events } : {}),
  });
  events?.watch(manager);
  const server = new PoolManagerServer({ manager, book, log, tls });
  made.stop = async () => {
    status.close();
    await plane.close();
  };
  const grpcPort = (made.grpcPort = await server.listen(config.listenHost, pool.grpcPort));
  manager.start();
  made.stop = async () => {
    await server.close();
    await manager.close();
    status.close();
    await plane.close();
  };
  logger.info({ grpcPort, controlPlane: plane.kind, predictor: pool.predictor, runners: [pool.minRunners, pool.maxRunners] }, `pool manager serving on :${grpcPort}`);
};
