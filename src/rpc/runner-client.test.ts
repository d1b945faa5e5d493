/**
 * The LB's runner client against a runner's gRPC server on loopback: what
 * it makes of a runner's answers.
 */
import { afterEach, describe, expect, it } from 'vitest';
import type { Call } from '../models/index.js';
import { GrpcH2Server, type GrpcServerCall } from './server.js';
import { DRAINING_HEADER, refusalMessage } from './runner-protocol.js';
import { encodeClientMsg, encodeRunnerMsg, ENGAGE_PATH } from './wire.js';
import { RunnerClient, type EngageRequest } from './runner-client.js';
import { Runner } from '../lb/pool.js';

let server: GrpcH2Server | undefined;
let client: RunnerClient | undefined;
afterEach(async () => {
  client?.close();
  await server?.close(200);
  server = client = undefined;
});

/** A call as the client reads it (its timeout; not a trigger call). */
const request: EngageRequest = {
  call: { fn: { timeoutS: 5 } } as Call,
  callJson: '{}',
  bodyFrames: encodeClientMsg({ data: { data: Buffer.alloc(0), eof: true } }),
  metadata: {},
};

/** A runner whose every engagement is refused, saying it drains when `draining`. */
async function refusingRunner(draining: boolean): Promise<string> {
  server = new GrpcH2Server({
    maxMessageBytes: 1 << 20,
    methods: new Map([
      [
        ENGAGE_PATH,
        (call: GrpcServerCall) =>
          call.receive(() => {
            if (draining) call.respond({ [DRAINING_HEADER]: '1' });
            call.end(encodeRunnerMsg({ finished: refusalMessage('id', 503, 'Timed out - server too busy') }));
          }),
      ],
    ]),
  });
  return `127.0.0.1:${await server.listen('127.0.0.1', 0)}`;
}

describe('RunnerClient', () => {
  it('takes a draining runner\'s refusal as "place nothing more here": the runner is not up while that connection lasts', async () => {
    client = new RunnerClient(await refusingRunner(true));
    const runner = new Runner(client);
    expect(runner.up).toBe(true);
    expect(await client.engage(request)).toMatchObject({ kind: 'refused' });
    expect(client.draining).toBe(true);
    expect(runner.up).toBe(false);
  });

  it('keeps placing on a runner that refused for want of room (it did not say it drains)', async () => {
    client = new RunnerClient(await refusingRunner(false));
    const runner = new Runner(client);
    expect(await client.engage(request)).toMatchObject({ kind: 'refused' });
    expect(client.draining).toBe(false);
    expect(runner.up).toBe(true);
  });
});
