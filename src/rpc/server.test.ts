import * as grpc from '@grpc/grpc-js';
import { connect, constants as h2, type ClientHttp2Session } from 'node:http2';
import { createConnection } from 'node:net';
import { afterEach, describe, expect, it } from 'vitest';
import { grpcJsClient as grpcJs } from '../../test/support/grpc-js.js';
import { GrpcH2Server, unary, type GrpcHandler, type GrpcServerCall } from './server.js';
import { runnerStatusMessage, type ClientMsg, type RunnerMsg, type RunnerStatusMsg } from './runner-protocol.js';
import { decodeClientMsg, encodeClientMsg, encodeRunnerMsg, encodeRunnerStatus, ENGAGE_PATH, FNTS_CLIENT_SETTING, GrpcStatus, STATUS_PATH } from './wire.js';

/** A grpc-js client of the runner protocol: what Fn's LB is to a runner (another gRPC implementation). */
const grpcJsClient = (port: number): ReturnType<typeof grpcJs> => grpcJs('fn-runner', 'RunnerProtocol', port);

const status = (active: number): RunnerStatusMsg => runnerStatusMessage({ active, received: 7, handled: 6, draining: true });

describe('the runner gRPC server on node:http2', () => {
  let server: GrpcH2Server | undefined;
  let client: grpc.Client | undefined;
  afterEach(async () => {
    client?.close();
    // No grace: the test is over, what is still open is cut (a closed client's connection waited out the grace).
    await server?.close(0);
    server = undefined;
    client = undefined;
  });

  /** An Engage that echoes the body back in one write, with trailers; and a call that waits until cancelled. */
  async function start(onCancelled?: () => void): Promise<number> {
    server = new GrpcH2Server({
      maxMessageBytes: 1024,
      methods: new Map([
        [STATUS_PATH, unary(() => encodeRunnerStatus(status(3)))],
        [
          ENGAGE_PATH,
          (call: GrpcServerCall) => {
            const got: ClientMsg[] = [];
            call.onCancel(() => onCancelled?.());
            call.receive((bytes) => {
              const msg = decodeClientMsg(bytes);
              got.push(msg);
              if (msg.try?.models_call_json === 'wait') call.respond();
              if (!msg.data?.eof) return;
              const echo = Buffer.concat(got.flatMap((m) => (m.data ? [m.data.data] : [])));
              const out: RunnerMsg[] = [{ result_start: { http: { status_code: 201, headers: [{ key: 'X-A', value: 'b' }] } } }, { data: { data: echo, eof: false } }];
              call.end(Buffer.concat(out.map(encodeRunnerMsg)), { 'fnts-log-bin': Buffer.from('log line').toString('base64') });
            });
          },
        ],
      ]),
    });
    return server.listen('127.0.0.1', 0);
  }

  it('answers a unary Status and a streaming Engage as grpc-js reads them, trailers included', async () => {
    const port = await start();
    const c = grpcJsClient(port);
    client = c;
    const s = await new Promise<RunnerStatusMsg>((resolve, reject) => c['Status']!({}, (err: Error | null, r: RunnerStatusMsg) => (err ? reject(err) : resolve(r))));
    expect(s).toMatchObject({ active: 3, requestsReceived: 7, requestsHandled: 6, customStatus: { draining: 'true' } });

    const engage = c['Engage']!() as grpc.ClientDuplexStream<ClientMsg, RunnerMsg>;
    const messages: RunnerMsg[] = [];
    engage.on('data', (m: RunnerMsg) => messages.push(m));
    const ended = new Promise<grpc.Metadata>((resolve, reject) => {
      engage.on('status', (st: grpc.StatusObject) => (st.code === 0 ? resolve(st.metadata) : reject(new Error(st.details))));
    });
    engage.write({ try: { models_call_json: '{}', slot_hash_id: '', extensions: {} } });
    engage.write({ data: { data: Buffer.from('hel'), eof: false } });
    engage.write({ data: { data: Buffer.from('lo'), eof: true } });
    engage.end();
    const trailers = await ended;
    expect(messages.map((m) => m.body)).toEqual(['result_start', 'data']);
    expect(messages[0]!.result_start!.http!.status_code).toBe(201);
    expect(Buffer.from(messages[1]!.data!.data).toString()).toBe('hello');
    expect(trailers.get('fnts-log-bin')[0]!.toString()).toBe('log line');
  });

  it('answers UNIMPLEMENTED for a method it does not serve, and RESOURCE_EXHAUSTED for a message above its limit, telling the handler its call is over', async () => {
    let cancelled = false;
    const port = await start(() => (cancelled = true));
    const c = grpcJsClient(port);
    client = c;
    const configure = await new Promise<grpc.ServiceError>((resolve) => c['ConfigureRunner']!({ config: {} }, (err: grpc.ServiceError) => resolve(err)));
    expect(configure.code).toBe(grpc.status.UNIMPLEMENTED);

    const engage = c['Engage']!() as grpc.ClientDuplexStream<ClientMsg, RunnerMsg>;
    engage.on('data', () => undefined);
    const failed = new Promise<grpc.StatusObject>((resolve) => engage.on('status', resolve));
    engage.on('error', () => undefined);
    engage.write({ try: { models_call_json: 'x'.repeat(2000), slot_hash_id: '', extensions: {} } });
    engage.end();
    const st = await failed;
    expect(st.code).toBe(grpc.status.RESOURCE_EXHAUSTED);
    expect(st.details).toMatch(/above the 1024 allowed/);
    // A handler waiting for the request (the runner waits for a TryCall) must not wait forever.
    expect(cancelled).toBe(true);
  });

  it('closes a connection nghttp2 ended with a GOAWAY (a frame header claiming 16 MiB) once it is idle, and keeps an idle client that answers pings', async () => {
    server = new GrpcH2Server({ maxMessageBytes: 1024, methods: answersOk(), idleCheckMs: 200 });
    const port = await server.listen('127.0.0.1', 0);
    // A client that does nothing wrong and then sits idle for five checks: still connected, and served.
    const idle = connect(`http://127.0.0.1:${port}`);
    idle.on('error', () => undefined);
    await new Promise((r) => idle.once('remoteSettings', r));
    // The hostile one: a preface, and a DATA frame header claiming 16 MiB, which nghttp2 answers with GOAWAY(FRAME_SIZE_ERROR).
    const raw = createConnection(port, '127.0.0.1');
    raw.on('error', () => undefined);
    const huge = Buffer.alloc(9);
    huge.writeUIntBE(0xffffff, 0, 3);
    huge.writeUInt32BE(1, 5);
    const t0 = performance.now();
    raw.write(Buffer.concat([Buffer.from('PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n', 'latin1'), Buffer.from([0, 0, 0, 4, 0, 0, 0, 0, 0]), huge, Buffer.alloc(512, 1)]));
    // It keeps sending: noise after the GOAWAY is not activity.
    const noise = setInterval(() => raw.write(Buffer.alloc(100, 3)), 50);
    const closed = await new Promise<boolean>((resolve) => {
      const timer = setTimeout(() => resolve(false), 3000);
      raw.once('close', () => {
        clearTimeout(timer);
        resolve(true);
      });
    });
    clearInterval(noise);
    expect(closed).toBe(true);
    expect(performance.now() - t0).toBeLessThan(1500);
    await new Promise((r) => setTimeout(r, 1000));
    expect(idle.closed || idle.destroyed).toBe(false);
    const answer = await new Promise<string>((resolve) => {
      const stream = idle.request({ [h2.HTTP2_HEADER_METHOD]: 'POST', [h2.HTTP2_HEADER_PATH]: ENGAGE_PATH, [h2.HTTP2_HEADER_CONTENT_TYPE]: 'application/grpc', te: 'trailers' });
      stream.on('error', () => undefined);
      stream.on('trailers', (t) => resolve(String(t['grpc-status'])));
      stream.end(encodeClientMsg({ try: { models_call_json: '{}', slot_hash_id: '', extensions: {} } }));
    });
    expect(answer).toBe('0');
    idle.close();
  });

  it('tells the handler when the client resets a call, and keeps serving', async () => {
    let cancelled!: () => void;
    const wasCancelled = new Promise<void>((r) => (cancelled = r));
    const port = await start(() => cancelled());
    const session = connect(`http://127.0.0.1:${port}`);
    session.on('error', () => undefined);
    const stream = session.request({ [h2.HTTP2_HEADER_METHOD]: 'POST', [h2.HTTP2_HEADER_PATH]: ENGAGE_PATH, [h2.HTTP2_HEADER_CONTENT_TYPE]: 'application/grpc', te: 'trailers' });
    stream.on('error', () => undefined);
    stream.write(encodeClientMsg({ try: { models_call_json: 'wait', slot_hash_id: '', extensions: {} } }));
    await new Promise((r) => stream.once('response', r));
    stream.close(h2.NGHTTP2_CANCEL);
    await wasCancelled;
    session.close();
    const c = grpcJsClient(port);
    client = c;
    const s = await new Promise<RunnerStatusMsg>((resolve, reject) => c['Status']!({}, (err: Error | null, r: RunnerStatusMsg) => (err ? reject(err) : resolve(r))));
    expect(s.active).toBe(3);
  });

  it("ends a call past the client's grpc-timeout with DEADLINE_EXCEEDED and cancels it", async () => {
    let cancelled = false;
    const port = await start(() => (cancelled = true));
    const session = connect(`http://127.0.0.1:${port}`);
    session.on('error', () => undefined);
    const stream = session.request({
      [h2.HTTP2_HEADER_METHOD]: 'POST',
      [h2.HTTP2_HEADER_PATH]: ENGAGE_PATH,
      [h2.HTTP2_HEADER_CONTENT_TYPE]: 'application/grpc',
      te: 'trailers',
      'grpc-timeout': '80m',
    });
    stream.on('error', () => undefined);
    stream.write(encodeClientMsg({ try: { models_call_json: 'wait', slot_hash_id: '', extensions: {} } }));
    const trailers = await new Promise<Record<string, unknown>>((resolve) => stream.once('trailers', resolve));
    expect(trailers['grpc-status']).toBe(String(GrpcStatus.DEADLINE_EXCEEDED));
    expect(cancelled).toBe(true);
    session.close();
  });

  /**
   * Makes `calls` calls, `concurrency` at a time, as grpc-go does: the
   * request without END_STREAM, and RST_STREAM(NO_ERROR) once the trailers
   * came. After a GOAWAY, new streams go on a new connection; those in
   * flight stay where they are. A stream refused (RST_STREAM
   * REFUSED_STREAM: nothing of it was processed) is sent again on the
   * current connection, as gRPC clients do and fnts's LB does (a call that
   * never reached a runner is placed again): the client's own HTTP/2 layer
   * refuses the streams it had queued, not yet sent, when a notice comes.
   * With `fnts`, the connections carry fnts's LB's setting
   * (FNTS_CLIENT_SETTING).
   */
  async function resettingClient(
    port: number,
    calls: number,
    fnts: boolean,
  ): Promise<{ results: string[]; goaways: Array<{ code: number; lastStreamId: number }>; connections: number; perSecond: number; refused: number }> {
    const goaways: Array<{ code: number; lastStreamId: number }> = [];
    const opened: ClientHttp2Session[] = [];
    let session!: ClientHttp2Session;
    const dial = (): void => {
      const s = connect(`http://127.0.0.1:${port}`, fnts ? { settings: { customSettings: { [FNTS_CLIENT_SETTING]: 1 } } } : {});
      opened.push(s);
      s.on('error', () => undefined);
      s.on('goaway', (code: number, lastStreamId: number) => {
        goaways.push({ code, lastStreamId });
        if (session === s) dial();
      });
      session = s;
    };
    dial();
    let refused = 0;
    const engage = (): Promise<'ok' | string> =>
      new Promise((resolve) => {
        const stream = session.request(
          { [h2.HTTP2_HEADER_METHOD]: 'POST', [h2.HTTP2_HEADER_PATH]: ENGAGE_PATH, [h2.HTTP2_HEADER_CONTENT_TYPE]: 'application/grpc', te: 'trailers' },
          { endStream: false },
        );
        let status: string | undefined;
        stream.on('trailers', (t) => {
          status = String(t['grpc-status']);
          stream.close(h2.NGHTTP2_NO_ERROR);
        });
        stream.on('error', () => undefined);
        stream.on('close', () => {
          if (status === undefined && stream.rstCode === h2.NGHTTP2_REFUSED_STREAM) {
            refused++;
            resolve(engage());
          } else resolve(status === '0' ? 'ok' : `closed with grpc-status ${status}, rst ${stream.rstCode}`);
        });
        stream.write(encodeClientMsg({ try: { models_call_json: '{}', slot_hash_id: '', extensions: {} } }));
        stream.resume();
      });
    const results: string[] = [];
    let next = 0;
    const t0 = performance.now();
    await Promise.all(
      Array.from({ length: 32 }, async () => {
        while (next++ < calls) results.push(await engage());
      }),
    );
    const ms = performance.now() - t0;
    for (const s of opened) s.close();
    return { results, goaways, connections: opened.length, perSecond: calls / (ms / 1000), refused };
  }

  /** Answers each call 'ok'; `served` counts the calls its handler was given. */
  let served = 0;
  const answersOk = (): Map<string, GrpcHandler> =>
    new Map([
      [
        ENGAGE_PATH,
        (call: GrpcServerCall) =>
          call.receive(() => {
            served++;
            call.end(encodeRunnerMsg({ data: { data: Buffer.from('ok'), eof: true } }));
          }),
      ],
    ]);

  it("keeps every call of a client that resets each stream it finished (grpc-go, Fn's LB) on one connection: past nghttp2's 1000 resets, nothing is cut or retired", async () => {
    server = new GrpcH2Server({ maxMessageBytes: 1024, methods: answersOk() });
    const port = await server.listen('127.0.0.1', 0);
    // 1500 resets: more than nghttp2's 1000 and its refill (33 a second) even at the slowest rate let through below (7.5 s).
    const { results, goaways, connections, perSecond } = await resettingClient(port, 1500, false);
    expect(results.filter((r) => r !== 'ok')).toEqual([]);
    expect(results.length).toBe(1500);
    // Far faster than nghttp2 refills (33 a second): unfiltered, the connection was cut after ~1000.
    expect(perSecond).toBeGreaterThan(200);
    expect(goaways).toEqual([]);
    expect(connections).toBe(1);
  });

  it('retires gracefully, with a shutdown notice, the connection of an fnts client that resets what it should not (it skips the filter)', async () => {
    served = 0;
    server = new GrpcH2Server({ maxMessageBytes: 1024, methods: answersOk() });
    const port = await server.listen('127.0.0.1', 0);
    const { results, goaways } = await resettingClient(port, 2500, true);
    expect(results.filter((r) => r !== 'ok')).toEqual([]);
    // Every call served once: a stream the client sent again had not been served (refusing it was safe).
    expect(served).toBe(2500);
    expect(goaways.length).toBeGreaterThanOrEqual(2);
    expect(goaways.every((g) => g.code === h2.NGHTTP2_NO_ERROR && g.lastStreamId === 2 ** 31 - 1)).toBe(true);
  });

  it("still counts, toward nghttp2's limit, resets of calls the runner is serving (the rapid-reset attack): the connection is retired gracefully, not cut", async () => {
    // A call that never ends: each reset cuts work in progress.
    server = new GrpcH2Server({ maxMessageBytes: 1024, methods: new Map([[ENGAGE_PATH, (call: GrpcServerCall) => call.receive(() => undefined)]]) });
    const port = await server.listen('127.0.0.1', 0);
    const session = connect(`http://127.0.0.1:${port}`);
    session.on('error', () => undefined);
    const goaways: number[] = [];
    session.on('goaway', (code: number, lastStreamId: number) => goaways.push(code === h2.NGHTTP2_NO_ERROR && lastStreamId === 2 ** 31 - 1 ? 0 : code));
    for (let i = 0; i < 1200 && goaways.length === 0; i++) {
      await new Promise<void>((resolve) => {
        const stream = session.request({ [h2.HTTP2_HEADER_METHOD]: 'POST', [h2.HTTP2_HEADER_PATH]: ENGAGE_PATH, [h2.HTTP2_HEADER_CONTENT_TYPE]: 'application/grpc' }, { endStream: false });
        stream.on('error', () => undefined);
        stream.on('close', () => resolve());
        stream.write(encodeClientMsg({ try: { models_call_json: '{}', slot_hash_id: '', extensions: {} } }), () => stream.close(h2.NGHTTP2_CANCEL));
      });
    }
    session.destroy();
    // The runner's own notice (NO_ERROR, 2^31-1) came before nghttp2 would have sent its INTERNAL_ERROR.
    expect(goaways[0]).toBe(0);
  });
});
