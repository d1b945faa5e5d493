/**
 * An app's syslog_url receives its functions' log lines, tagged with the
 * app, fn and call, over TCP and UDP (real sockets, real containers).
 */
import { createSocket } from 'node:dgram';
import { createServer, type AddressInfo } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { probeImage } from '../support/functions.js';
import { startTestServer, type TestServer } from '../support/server.js';
import { eventually } from '../support/wait.js';

describe('syslog forwarding', () => {
  let s: TestServer;
  const tcpLines: string[] = [];
  const udpLines: string[] = [];
  const tcp = createServer((socket) => {
    let partial = '';
    socket.on('data', (chunk) => {
      const lines = (partial + chunk.toString()).split('\n');
      partial = lines.pop() ?? '';
      tcpLines.push(...lines);
    });
  });
  const udp = createSocket('udp4');
  udp.on('message', (m) => udpLines.push(m.toString()));

  beforeAll(async () => {
    await new Promise<void>((r) => tcp.listen(0, '127.0.0.1', r));
    await new Promise<void>((r) => udp.bind(0, '127.0.0.1', r));
    s = await startTestServer();
  });
  afterAll(async () => {
    await s?.close();
    tcp.close();
    udp.close();
  });

  it("sends each line of a call to the app's syslog_url, tagged with app, fn and call", async () => {
    const image = await probeImage();
    const viaTcp = await s.app({ syslog_url: `tcp://127.0.0.1:${(tcp.address() as AddressInfo).port}` });
    const viaUdp = await s.app({ syslog_url: `udp://127.0.0.1:${udp.address().port}` });
    const quiet = await s.app();
    const fnTcp = await s.fn(viaTcp, image);
    const fnUdp = await s.fn(viaUdp, image);
    const fnQuiet = await s.fn(quiet, image);

    const a = (await s.invoke(fnTcp.id, { log: 'over tcp' })).headers.get('fn-call-id')!;
    const b = (await s.invoke(fnUdp.id, { log: 'over udp' })).headers.get('fn-call-id')!;
    await s.invoke(fnQuiet.id, { log: 'nowhere' });

    expect(await eventually(() => tcpLines.some((l) => l.includes('over tcp (stderr)')), 5000)).toBe(true);
    expect(await eventually(() => udpLines.some((l) => l.includes('over udp (stdout)')), 5000)).toBe(true);
    const line = tcpLines.find((l) => l.includes('over tcp (stderr)'))!;
    expect(line).toMatch(/^<14>1 \d{4}-\d\d-\d\dT[\d:.]+Z \S+ fnts - - - /);
    expect(line).toContain(`app_name=${viaTcp.name} fn_name=${fnTcp.name} call_id=${a}`);
    expect(udpLines.find((l) => l.includes('over udp'))).toContain(`call_id=${b}`);
    // Other apps' lines go nowhere near either.
    expect(tcpLines.filter((l) => l.includes('over udp') || l.includes('nowhere'))).toEqual([]);
    expect(udpLines.filter((l) => l.includes('over tcp') || l.includes('nowhere'))).toEqual([]);
  });
});
