/**
 * FN_NODE_TYPE=lb: the invoke endpoints, each call placed on a runner
 * (FN_RUNNER_ADDRESSES, or the runners a pool manager lists for the app's
 * group: FN_NPM_ADDRESS) by FN_PLACER; apps, fns and triggers come from the
 * API node (FN_RUNNER_API_URL), cached for FNTS_LB_CACHE_MSECS, and call
 * records go back to it. It keeps no database; detached calls wait in the
 * Redis queue the LBs and the API node share (FN_MQ_URL).
 */
import { selfInstance } from '../agent/index.js';
import {
  ApiChangeWatch,
  createPlacer,
  LbAgent,
  ManagedPool,
  PoolManagerClient,
  RemoteCallStore,
  RemoteInvokeGuard,
  RemoteLookup,
  RemoteSecrets,
  runnersCheck,
  StaticPool,
  type RunnerPool,
} from '../lb/index.js';
import { RunnerClient } from '../rpc/index.js';
import { InvokeHandler } from '../server/index.js';
import { detachedCalls, durableRedis, fleetTls, recorderFor } from './common.js';
import type { Role } from './parts.js';

export const lb: Role = async ({ config, logger, metrics }, made) => {
  const { fleet } = config;
  const runnerTls = fleetTls(config);
  if (!runnerTls) logger.warn('the runner protocol is plaintext: keep the runners on a private network, or set FNTS_GRPC_TLS_CERT, _KEY and _CA for mutual TLS');
  const connect = (address: string): RunnerClient => new RunnerClient(address, { tls: runnerTls });
  let pool: RunnerPool;
  if (fleet.npmAddress !== undefined) {
    const managed = new ManagedPool({
      // The manager is dialled at its own, known address: its certificate is checked against it, not the runners' name.
      manager: new PoolManagerClient(fleet.npmAddress, runnerTls && { ca: runnerTls.ca, key: runnerTls.key, cert: runnerTls.cert }),
      connect,
      lbId: selfInstance(),
      log: logger.child({ module: 'pool' }),
      pollMs: fleet.npmPollMs,
      advertiseMs: fleet.npmAdvertiseMs,
    });
    managed.start();
    pool = managed;
  } else {
    pool = new StaticPool(fleet.runnerAddresses.map(connect));
  }
  // Records and logs of the calls placed here go to the API node, batched as a full node's.
  const store = new RemoteCallStore(fleet.runnerApiUrl!, config.auth.apiToken);
  const recorder = recorderFor(config, logger, store);
  if (recorder) made.recorder = recorder;
  // Fns' secrets from the API node, kept no longer than its lookups: sent to runners with their calls.
  const secrets = new RemoteSecrets({ apiUrl: fleet.runnerApiUrl!, ttlMs: fleet.lbCacheMs, token: config.auth.apiToken });
  const invoker = new LbAgent({
    pool,
    secrets,
    placer: createPlacer(fleet.placer),
    log: logger,
    ...(metrics ? { listeners: [metrics] } : {}),
    ...(recorder ? { callListeners: [recorder] } : {}),
  });
  made.invoker = invoker;
  metrics?.watchRunners(() => invoker.view);
  const lookup = new RemoteLookup({ apiUrl: fleet.runnerApiUrl!, ttlMs: fleet.lbCacheMs, token: config.auth.apiToken, secrets });
  // Detached calls need a queue every LB shares (FN_MQ_URL): the LBs' dispatchers place them like any call.
  let intake;
  if (config.mqUrl) {
    const queue = (made.queue = await durableRedis(config, logger));
    metrics?.watchQueue(queue);
    const detached = detachedCalls({
      config,
      invoker,
      queue,
      // Runners refuse what they have no room for; the dispatcher tries again a moment later.
      resources: { waitAsyncCapacity: async () => undefined },
      store: recorder ? store : undefined,
      instance: selfInstance(),
      logger,
      metrics,
    });
    made.workers = detached.workers;
    intake = detached.intake;
  } else {
    logger.warn('no FN_MQ_URL: detached calls (Fn-Invoke-Type: detached) run as synchronous calls on this LB; set FN_MQ_URL=redis://... (shared by the LBs and the API node) to queue them');
  }
  // The API node's changes empty the lookups' cache as they happen (its fixed time only while they do not reach this LB).
  const watch = new ApiChangeWatch({
    apiUrl: fleet.runnerApiUrl!,
    token: config.auth.apiToken,
    log: logger.child({ module: 'changes' }),
    onChange: () => lookup.clear(),
    onLive: (live) => lookup.pushed(live),
  });
  watch.start();
  // invoke-auth: the API node checks callers' tokens (this LB keeps none), and says which of its tokens no shape tells.
  const guard = new RemoteInvokeGuard(fleet.runnerApiUrl!, config.auth.apiToken, { log: logger.child({ module: 'invoke-auth' }) });
  guard.start();
  made.stop = async () => {
    await Promise.all([watch.close(), guard.close()]);
  };
  made.invoke = new InvokeHandler({ invoker, lookup, logger, guard, maxRequestBytes: config.agent.maxRequestBytes, ...(intake ? { detached: intake } : {}) });
  if (config.auth.apiToken === undefined)
    logger.warn('no FN_TOKEN: the API node refuses this LB unless it runs with FNTS_AUTH=off; set FN_TOKEN to a token with the fleet role (fnts token create --role fleet)');
  logger.info({ ...(fleet.npmAddress !== undefined ? { npm: fleet.npmAddress } : { runners: fleet.runnerAddresses }), placer: fleet.placer, api: fleet.runnerApiUrl }, 'placing calls on runners');
  // Ready while a runner can be reached: a load balancer in front sends its callers elsewhere meanwhile.
  made.checks = [runnersCheck(pool)];
};
