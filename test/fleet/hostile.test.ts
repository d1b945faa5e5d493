/**
 * Hostile bytes on a pure runner's gRPC port, from whoever reaches it (a
 * runner trusts no caller to be an LB): bytes that are not HTTP/2 at all,
 * a frame header claiming far more than the runner takes, a gRPC message
 * whose length prefix says 2 GiB. Each is refused on its own connection,
 * at once and without the runner holding what was claimed, while a call
 * in flight on another connection completes normally. (TryCalls naming bad
 * images are in runner-limits.test.ts; messages over the limit from a
 * well-behaved client in src/rpc/server.test.ts.)
 */
import { connect as h2connect, constants as h2 } from 'node:http2';
import { connect, type Socket } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { callFn, newAppFromJson, newFnFromJson, newId, type Call, type CallFn } from '../../src/models/index.js';
import { encodeClientMsg, engageRequest, ENGAGE_PATH, GrpcStatus, RunnerClient } from '../../src/rpc/index.js';
import { probeImage } from '../support/functions.js';
import { startTestServer, type TestServer } from '../support/server.js';

const PREFACE = Buffer.from('PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n', 'latin1');

/** An HTTP/2 frame: a 9-byte header claiming `length`, then `payload` (which may be shorter than claimed). */
function frame(type: number, flags: number, id: number, length: number, payload: Buffer = Buffer.alloc(0)): Buffer {
  const head = Buffer.alloc(9);
  head.writeUIntBE(length, 0, 3);
  head[3] = type;
  head[4] = flags;
  head.writeUInt32BE(id, 5);
  return Buffer.concat([head, payload]);
}
const EMPTY_SETTINGS = frame(0x4, 0, 0, 0);
const GOAWAY = 0x7;

/** The error code of the first GOAWAY among the frames the runner sent (after its SETTINGS), if one is whole. */
function goawayIn(read: Buffer): number | undefined {
  for (let at = 0; at + 9 <= read.length;) {
    const length = read.readUIntBE(at, 3);
    if (read[at + 3] === GOAWAY && at + 9 + 8 <= read.length) return read.readUInt32BE(at + 9 + 4);
    at += 9 + length;
  }
  return undefined;
}

/**
 * Sends `bytes` on a raw connection to the runner and waits, at most
 * `boundMs`, until it closes the connection, or `until` goaway, sends a GOAWAY (after which
 * nghttp2 reads nothing more of it; the runner closes such a connection
 * once it fails to answer a ping, src/rpc/server.test.ts shows it): what
 * happened, and when.
 */
async function rawExchange(port: number, bytes: Buffer, until: 'close' | 'goaway', boundMs = 5000): Promise<{ closed: boolean; goaway: number | undefined; ms: number }> {
  const socket: Socket = connect(port, '127.0.0.1');
  socket.on('error', () => undefined);
  await new Promise<void>((resolve) => socket.once('connect', () => resolve()));
  const chunks: Buffer[] = [];
  const t0 = performance.now();
  const result = await new Promise<{ closed: boolean; goaway: number | undefined; ms: number }>((resolve) => {
    const done = (closed: boolean): void => {
      clearTimeout(timer);
      resolve({ closed, goaway: goawayIn(Buffer.concat(chunks)), ms: performance.now() - t0 });
    };
    const timer = setTimeout(() => done(false), boundMs);
    socket.on('data', (c: Buffer) => {
      chunks.push(c);
      if (until === 'goaway' && goawayIn(Buffer.concat(chunks)) !== undefined) done(false);
    });
    socket.once('close', () => done(true));
    socket.write(bytes);
  });
  socket.destroy();
  return result;
}

describe("hostile bytes on a pure runner's gRPC port", () => {
  let runner: TestServer;
  let client: RunnerClient;
  let good: CallFn;

  beforeAll(async () => {
    runner = await startTestServer({ FN_NODE_TYPE: 'pure-runner', FN_GRPC_PORT: '0' });
    client = new RunnerClient(`127.0.0.1:${runner.server.grpcPort}`);
    const app = newAppFromJson({ name: 'hostile' });
    good = callFn(app, newFnFromJson({ app_id: app.id, name: 'probe', image: await probeImage() }));
    // Warm: a hot container, so that the good calls below are short and their timing is the runner's, not a cold start's.
    expect(await goodCall(0)).toBe(200);
  });

  afterAll(async () => {
    client?.close();
    await runner?.close();
  });

  /** A call of the probe that sleeps `sleep` ms, through fnts's own LB client on its own connection: its status. */
  async function goodCall(sleep: number): Promise<number> {
    const call: Call = {
      id: newId(),
      type: 'sync',
      fn: good,
      triggerId: undefined,
      method: 'POST',
      url: 'http://runner.test/invoke',
      headers: ['Content-Type', 'application/json'],
      createdAt: Date.now(),
    };
    const attempt = await client.engage(engageRequest(call, Buffer.from(JSON.stringify({ sleep }))));
    if (attempt.kind !== 'committed') return 0;
    return (await attempt.response).status;
  }

  /** Runs `hostile` while a good call of ~1 s is in flight on another connection; the good call must answer 200. */
  async function beside<T>(hostile: () => Promise<T>): Promise<T> {
    const inFlight = goodCall(1000);
    const result = await hostile();
    expect(await inFlight).toBe(200);
    return result;
  }

  it('closes a connection whose bytes are not HTTP/2 (an HTTP/1.1 request, then noise), at once', async () => {
    const { closed, ms } = await beside(() => rawExchange(runner.server.grpcPort!, Buffer.concat([Buffer.from('GET / HTTP/1.1\r\nHost: runner\r\n\r\n'), Buffer.alloc(4096, 0xa5)]), 'close'));
    expect(closed).toBe(true);
    expect(ms).toBeLessThan(1000);
  });

  it('answers a frame header claiming 16 MiB with GOAWAY(FRAME_SIZE_ERROR) at once, without waiting for the bytes', async () => {
    for (const withFntsSetting of [false, true]) {
      // fnts's LB marks its connections (they skip the reset filter); any other client goes through the filter: both must refuse.
      const settings = withFntsSetting ? frame(0x4, 0, 0, 6, Buffer.from([0xf7, 0xa5, 0, 0, 0, 1])) : EMPTY_SETTINGS;
      const bytes = Buffer.concat([PREFACE, settings, frame(0x0, 0, 1, 0xffffff, Buffer.alloc(1024, 1))]);
      const { goaway, ms } = await beside(() => rawExchange(runner.server.grpcPort!, bytes, 'goaway'));
      expect(goaway, `fnts setting: ${withFntsSetting}`).toBe(h2.NGHTTP2_FRAME_SIZE_ERROR);
      expect(ms).toBeLessThan(1000);
    }
  });

  it('fails a call whose gRPC length prefix says 2 GiB with RESOURCE_EXHAUSTED at once, not after reading it', async () => {
    const session = h2connect(`http://127.0.0.1:${runner.server.grpcPort}`);
    session.on('error', () => undefined);
    try {
      const trailers = await beside(
        () =>
          new Promise<Record<string, unknown>>((resolve, reject) => {
            const stream = session.request(
              { [h2.HTTP2_HEADER_METHOD]: 'POST', [h2.HTTP2_HEADER_PATH]: ENGAGE_PATH, [h2.HTTP2_HEADER_CONTENT_TYPE]: 'application/grpc', te: 'trailers' },
              { endStream: false },
            );
            stream.on('error', reject);
            const end = (headers: Record<string, unknown>): void => void (headers['grpc-status'] !== undefined && resolve(headers));
            stream.on('response', end);
            stream.on('trailers', end);
            const prefix = Buffer.alloc(5);
            prefix.writeUInt32BE(2 ** 31, 1);
            // The prefix and a little of the "message": the stream stays open, as a client sending 2 GiB would keep it.
            stream.write(Buffer.concat([prefix, Buffer.alloc(1024, 2)]));
          }),
      );
      expect(trailers['grpc-status']).toBe(String(GrpcStatus.RESOURCE_EXHAUSTED));
      expect(decodeURIComponent(String(trailers['grpc-message']))).toMatch(/a gRPC message of 2147483648 bytes, above the \d+ allowed/);
    } finally {
      session.destroy();
    }
    // Nothing of it stays counted as a call in flight (a runner that drains waits for those).
    expect((await client.status()).active).toBe(0);
  });

  it('goes on serving after all of it: the next call on the LB connection answers 200, and Status counts no call in flight', async () => {
    expect(await goodCall(0)).toBe(200);
    expect((await client.status()).active).toBe(0);
    // A TryCall that is not JSON at all is answered too, on its own stream.
    const session = h2connect(`http://127.0.0.1:${runner.server.grpcPort}`);
    session.on('error', () => undefined);
    try {
      const stream = session.request({ [h2.HTTP2_HEADER_METHOD]: 'POST', [h2.HTTP2_HEADER_PATH]: ENGAGE_PATH, [h2.HTTP2_HEADER_CONTENT_TYPE]: 'application/grpc', te: 'trailers' });
      stream.on('error', () => undefined);
      const chunks: Buffer[] = [];
      stream.on('data', (c: Buffer) => chunks.push(c));
      stream.end(encodeClientMsg({ try: { models_call_json: '{not json', slot_hash_id: '', extensions: {} } }));
      await new Promise((resolve) => stream.once('close', resolve));
      expect(Buffer.concat(chunks).toString('latin1')).toContain('Invalid call: models_call_json is not JSON');
    } finally {
      session.destroy();
    }
    expect(await goodCall(0)).toBe(200);
  });
});
