import * as http2 from 'node:http2';
import type { AddressInfo } from 'node:net';
import { afterEach, describe, expect, it } from 'vitest';
import { eventually } from '../../test/support/wait.js';
import { H2Channel } from './channel.js';

const servers: http2.Http2Server[] = [];
const sessions = new Set<http2.ServerHttp2Session>();
const channels: H2Channel[] = [];
afterEach(async () => {
  for (const c of channels.splice(0)) c.close();
  for (const s of sessions) s.destroy();
  sessions.clear();
  await Promise.all(servers.splice(0).map((s) => new Promise((r) => s.close(r))));
});

/** An HTTP/2 server answering every stream 200; `onSession` sees each connection. */
async function server(onSession: (s: http2.ServerHttp2Session) => void = () => undefined, port = 0): Promise<number> {
  const s = http2.createServer();
  s.on('session', (session) => {
    sessions.add(session);
    session.on('error', () => undefined);
    onSession(session);
  });
  s.on('stream', (stream) => {
    stream.on('error', () => undefined);
    stream.respond({ ':status': 200 }, { endStream: true });
  });
  servers.push(s);
  await new Promise<void>((resolve) => s.listen(port, '127.0.0.1', resolve));
  return (s.address() as AddressInfo).port;
}

/** One request on the channel: its status, or the error that ended it. */
function ask(channel: H2Channel): Promise<number | Error> {
  return new Promise((resolve) => {
    channel.request({ ':method': 'POST', ':path': '/x' }).then((stream) => {
      stream.on('response', (h) => resolve(Number(h[':status'])));
      stream.on('error', (err) => resolve(err));
      stream.end();
    }, resolve);
  });
}

describe("H2Channel (the LB's connection to a runner)", () => {
  it("pings the runner, and half as often once it says too many pings (as Fn's Go runners do)", async () => {
    let pings = 0;
    const port = await server((session) => {
      session.on('ping', () => {
        pings++;
        session.goaway(http2.constants.NGHTTP2_ENHANCE_YOUR_CALM, 0, Buffer.from('too_many_pings'));
      });
    });
    const channel = new H2Channel(`127.0.0.1:${port}`, { keepaliveMs: 40 });
    channels.push(channel);
    expect(await ask(channel)).toBe(200);
    await new Promise((r) => setTimeout(r, 150));
    expect(pings).toBeGreaterThanOrEqual(1);
    expect(channel.keepaliveIntervalMs).toBe(80);
    // The next call takes a new connection.
    expect(await ask(channel)).toBe(200);
  });

  it('is unreachable once a connection fails, and reachable again when the runner listens (redialed in the background)', async () => {
    const probe = http2.createServer();
    await new Promise<void>((resolve) => probe.listen(0, '127.0.0.1', resolve));
    const port = (probe.address() as AddressInfo).port;
    await new Promise((r) => probe.close(r));
    const channel = new H2Channel(`127.0.0.1:${port}`);
    channels.push(channel);
    expect(channel.reachable).toBe(true);
    expect(await ask(channel)).toBeInstanceOf(Error);
    expect(channel.reachable).toBe(false);
    await server(undefined, port);
    const until = Date.now() + 3000;
    while (!channel.reachable && Date.now() < until) await new Promise((r) => setTimeout(r, 20));
    expect(channel.reachable).toBe(true);
    expect(await ask(channel)).toBe(200);
  });

  it("holds calls beyond the runner's SETTINGS_MAX_CONCURRENT_STREAMS until a stream ends, failing none", async () => {
    // A server that lets 2 streams run at once, and answers each only when the test says.
    const s = http2.createServer({ settings: { maxConcurrentStreams: 2 } });
    const held: http2.ServerHttp2Stream[] = [];
    let open = 0;
    let most = 0;
    s.on('session', (session) => {
      sessions.add(session);
      session.on('error', () => undefined);
    });
    s.on('stream', (stream) => {
      stream.on('error', () => undefined);
      most = Math.max(most, ++open);
      stream.once('close', () => open--);
      held.push(stream);
    });
    servers.push(s);
    await new Promise<void>((resolve) => s.listen(0, '127.0.0.1', resolve));
    const channel = new H2Channel(`127.0.0.1:${(s.address() as AddressInfo).port}`);
    channels.push(channel);
    // At once on a new connection: the channel waits for the runner's SETTINGS, which say the limit.
    const answers = Array.from({ length: 6 }, () => ask(channel));
    let answered = 0;
    while (answered < 6) {
      expect(await eventually(() => held.length > 0, 2_000, 5)).toBe(true);
      expect(held.length).toBeLessThanOrEqual(2);
      held.shift()!.respond({ ':status': 200 }, { endStream: true });
      answered++;
    }
    expect(await Promise.all(answers)).toEqual([200, 200, 200, 200, 200, 200]);
    expect(most).toBe(2);
  });
});
