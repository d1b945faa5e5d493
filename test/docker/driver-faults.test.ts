/**
 * The Docker driver when the engine fails: the driver fault contract, run
 * against the real engine behind a proxy that fails one step at a time
 * (test/support/faulty-engine.ts), every step with every failure: an error
 * answer, a connection reset, a redirect (the engine's answer to a path it
 * finds unclean, which once ended the process), a stream cut mid-way, and
 * a wait never answered.
 */
import Docker from 'dockerode';
import { TAG_LABEL } from '../../src/agent/index.js';
import { runDriverFaultContract, type EngineStep } from '../../src/drivers/driver-faults.contract.js';
import { DockerDriver } from '../../src/drivers/index.js';
import { ensureFunctionImage } from '../support/images.js';
import { FaultyEngine, type EngineFault } from '../support/faulty-engine.js';
import { RUN_TAG_ENV } from '../support/tag.js';

const FOREVER_JS = 'setInterval(() => {}, 1 << 30);\n';
const image = await ensureFunctionImage('forever', FOREVER_JS);
const tag = process.env[RUN_TAG_ENV];

const STEPS: EngineStep[] = ['ping', 'list', 'inspect-image', 'create', 'attach', 'start', 'wait', 'stats', 'inspect', 'pause', 'unpause', 'remove'];
const STREAMS: EngineStep[] = ['attach', 'wait', 'stats'];
const cases: Array<[EngineStep, EngineFault]> = [
  ...STEPS.flatMap((step) => (['error', 'reset', 'redirect'] as const).map((fault): [EngineStep, EngineFault] => [step, fault])),
  ...STREAMS.map((step): [EngineStep, EngineFault] => [step, 'cut']),
  // The engine never answers the wait (it forgets one for a container removed as the wait is set up).
  ['wait', 'silent'],
];

runDriverFaultContract(
  'docker',
  async (step, fault) => {
    const engine = await FaultyEngine.start();
    engine.inject(step, fault as EngineFault);
    const driver = new DockerDriver({
      docker: new Docker({ socketPath: engine.socketPath }),
      pullTimeoutMs: 10_000,
      maxPids: 50,
      maxOpenFiles: 350,
      readOnlyRootfs: true,
      unprivileged: true,
    });
    return { driver, heal: () => engine.clear(), close: () => engine.close() };
  },
  { forever: { image }, cases, labels: tag ? { [TAG_LABEL]: tag } : {} },
);
