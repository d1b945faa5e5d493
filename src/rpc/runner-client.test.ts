/**
 * The LB's runner client against a runner's gRPC server on loopback: what
 * it makes of a runner's answers.
 */
import { constants as h2 } from 'node:http2';
import type { Readable } from 'node:stream';
import { afterEach, describe, expect, it } from 'vitest';
import { callFromJson, type Call } from '../models/index.js';
import { GrpcH2Server, type GrpcServerCall } from './server.js';
import { DRAINING_HEADER, refusalMessage, SECRETS_FIELD, takeSecrets, type CallFinishedMsg, type RunnerMsg } from './runner-protocol.js';
import { encodeClientMsg, encodeRunnerMsg, ENGAGE_PATH } from './wire.js';
import { engageRequest, loopbackAddress, RunnerClient, type EngageRequest } from './runner-client.js';
import { Runner } from '../lb/pool.js';

let server: GrpcH2Server | undefined;
let client: RunnerClient | undefined;
afterEach(async () => {
  client?.close();
  // No grace: the test is over, what is still open is cut (a closed client's connection waited out the grace).
  await server?.close(0);
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

  /** A runner whose Engage runs `serve` once the request's last frame came. */
  async function runner(serve: (call: GrpcServerCall) => void): Promise<string> {
    server = new GrpcH2Server({
      maxMessageBytes: 1 << 20,
      methods: new Map([
        [
          ENGAGE_PATH,
          (call: GrpcServerCall) =>
            call.receive(
              () => undefined,
              () => serve(call),
            ),
        ],
      ]),
    });
    return `127.0.0.1:${await server.listen('127.0.0.1', 0)}`;
  }
  const done: CallFinishedMsg = { ...refusalMessage('id', 0, ''), success: true, startedAt: 's', completedAt: 'c' };
  const frames = (...msgs: RunnerMsg[]): Buffer => Buffer.concat(msgs.map((m) => encodeRunnerMsg(m)));
  const text = async (body: Buffer | Readable): Promise<string> => {
    if (Buffer.isBuffer(body)) return body.toString();
    let out = '';
    for await (const chunk of body) out += String(chunk);
    return out;
  };

  it('commits to a call the runner answers, handing on a whole answer as a Buffer and a longer one as a stream', async () => {
    client = new RunnerClient(
      await runner((call) => {
        void call.write(frames({ result_start: { http: { status_code: 201, headers: [{ key: 'X-A', value: 'b' }] } } }, { data: { data: Buffer.from('he'), eof: false } }));
        setTimeout(() => call.end(frames({ data: { data: Buffer.from('llo'), eof: false } }, { finished: done })), 30);
      }),
    );
    const attempt = await client.engage(request);
    expect(attempt.kind).toBe('committed');
    if (attempt.kind !== 'committed') return;
    const answer = await attempt.response;
    expect([answer.status, answer.headers, Buffer.isBuffer(answer.body)]).toEqual([201, ['X-A', 'b'], false]);
    expect(await text(answer.body)).toBe('hello');
    expect(await attempt.finished).toMatchObject({ success: true, startedAt: 's' });
    client.close();

    // Fn's runner: data with no result start is a 200; the whole answer in one read is a Buffer.
    await server!.close(0);
    client = new RunnerClient(await runner((call) => call.end(frames({ data: { data: Buffer.from('hi'), eof: false } }, { finished: done }))));
    const whole = await client.engage(request);
    if (whole.kind !== 'committed') throw new Error(`not committed: ${whole.kind}`);
    const body = (await whole.response).body;
    expect(Buffer.isBuffer(body) && body.toString()).toBe('hi');
    expect((await whole.response).status).toBe(200);
  });

  it("fails (nothing ran) where no runner listens, and fails the caller's answer (502) when a runner that accepted the call breaks off", async () => {
    const address = await runner(() => undefined);
    await server!.close(200);
    client = new RunnerClient(address);
    expect(await client.engage(request)).toMatchObject({ kind: 'failed' });
    client.close();

    client = new RunnerClient(
      await runner((call) => {
        call.respond();
        setTimeout(() => call.stream.close(h2.NGHTTP2_INTERNAL_ERROR), 20);
      }),
    );
    const attempt = await client.engage(request);
    expect(attempt.kind).toBe('committed');
    if (attempt.kind !== 'committed') return;
    await expect(attempt.response).rejects.toMatchObject({ status: 502, message: expect.stringMatching(/failed during the call/) });
    expect(await attempt.finished).toBeUndefined();
  });

  it("commits to a runner's error that is not a refusal, and fails the answer with it", async () => {
    client = new RunnerClient(await runner((call) => call.end(frames({ finished: { ...refusalMessage('id', 502, 'the function crashed'), startedAt: 's' } }))));
    const attempt = await client.engage(request);
    expect(attempt.kind).toBe('committed');
    if (attempt.kind !== 'committed') return;
    await expect(attempt.response).rejects.toMatchObject({ status: 502, message: 'the function crashed' });
  });
});

describe('secrets on the wire', () => {
  it('go in models_call_json only when given, and a runner takes them out', () => {
    const call = callFromJson({ id: 'c1', app_id: 'a1', fn_id: 'f1', image: 'img:1', secrets_version: 'ab12' });
    const plain = JSON.parse(engageRequest(call, Buffer.alloc(0)).callJson);
    expect(plain).not.toHaveProperty(SECRETS_FIELD);
    const request = engageRequest(call, Buffer.alloc(0), {}, { TOKEN: 's3cret' });
    expect(request.withSecrets).toBe(true);
    const parsed = JSON.parse(request.callJson);
    expect(takeSecrets(parsed)).toEqual(new Map([['TOKEN', 's3cret']]));
    expect(parsed).not.toHaveProperty(SECRETS_FIELD);
    expect(callFromJson(parsed).fn.secretsVersion).toBe('ab12');
    expect(takeSecrets({ id: 'c1' })).toBeUndefined();
    expect(() => takeSecrets({ [SECRETS_FIELD]: { TOKEN: 1 } })).toThrow(/fnts_secrets.TOKEN must be a string/);
    expect(() => takeSecrets({ [SECRETS_FIELD]: { '../x': 'v' } })).toThrow();
  });

  it('go only to a runner on loopback or over mutual TLS', async () => {
    expect(['127.0.0.1:9190', 'localhost:9190', '[::1]:9190', '127.3.2.1:1', '[::ffff:127.0.0.1]:9190'].map(loopbackAddress)).toEqual([true, true, true, true, true]);
    expect(['10.0.0.1:9190', 'runner:9190', '[::2]:9190', '128.0.0.1:1', '127.example.com:9190', 'not an address'].map(loopbackAddress)).toEqual([false, false, false, false, false, false]);
    const exposed = new RunnerClient('192.0.2.1:9190');
    try {
      expect(exposed.secure).toBe(false);
      const call = callFromJson({ id: 'c1', app_id: 'a1', fn_id: 'f1', image: 'img:1', secrets_version: 'ab12' });
      expect(await exposed.engage(engageRequest(call, Buffer.alloc(0), {}, { TOKEN: 's3cret' }))).toMatchObject({ kind: 'failed' });
    } finally {
      exposed.close();
    }
  });
});
