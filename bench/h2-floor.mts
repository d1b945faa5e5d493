/**
 * The floor under the LB path: the CPU of one bare HTTP/2 stream per
 * request, with the runner protocol's Engage pattern (a request body, then
 * headers, three DATA frames and trailers back), client and server in two
 * processes and no application code; HTTP/1.1 keep-alive for comparison
 * (what a full node's callers use); and length-prefixed messages on a plain
 * TCP connection (one write each way: the least any transport between LB
 * and runner could cost). npm run bench:h2
 *
 * An LB path adds its own HTTP front and one round trip to the runner (both
 * sides) to a full node's work, so these figures bound how close the LB can
 * come to a full node.
 */
import { fork, type ChildProcess } from 'node:child_process';
import http from 'node:http';
import http2 from 'node:http2';
import net, { type AddressInfo } from 'node:net';
import { fileURLToPath } from 'node:url';

const N = Number(process.env['H2_FLOOR_CALLS'] ?? 20_000);

function serve(kind: string): void {
  const port = (s: http.Server | http2.Http2Server | net.Server): void => void process.send!((s.address() as AddressInfo).port);
  if (kind === 'raw') {
    // Length-prefixed messages on a plain TCP connection: one write each way.
    const s = net.createServer((c) => {
      c.setNoDelay(true);
      let pending: Buffer = Buffer.alloc(0);
      c.on('data', (chunk: Buffer) => {
        pending = pending.length === 0 ? chunk : Buffer.concat([pending, chunk]);
        while (pending.length >= 4 && pending.length >= 4 + pending.readUInt32BE(0)) {
          pending = pending.subarray(4 + pending.readUInt32BE(0));
          const out = Buffer.alloc(4 + 130);
          out.writeUInt32BE(130, 0);
          c.write(out);
        }
      });
    });
    s.listen(0, '127.0.0.1', () => port(s));
  } else if (kind === 'h2') {
    const s = http2.createServer();
    s.on('stream', (st) => {
      st.on('data', () => undefined);
      st.on('end', () => {
        st.respond({ ':status': 200, 'content-type': 'application/grpc' }, { waitForTrailers: true });
        st.on('wantTrailers', () => st.sendTrailers({ 'grpc-status': '0' }));
        st.write(Buffer.alloc(40));
        st.write(Buffer.alloc(30));
        st.end(Buffer.alloc(60));
      });
    });
    s.listen(0, '127.0.0.1', () => port(s));
  } else {
    const s = http.createServer((q, r) => {
      q.resume();
      q.on('end', () => r.end(Buffer.alloc(130)));
    });
    s.listen(0, '127.0.0.1', () => port(s));
  }
  process.on('message', (m) => {
    if (m !== 'cpu') return;
    const u = process.cpuUsage();
    process.send!({ cpu: u.user + u.system });
  });
}

async function measure(kind: 'h2' | 'http1' | 'raw'): Promise<string> {
  const child: ChildProcess = fork(fileURLToPath(import.meta.url), ['server', kind], { execArgv: process.execArgv });
  const port = await new Promise<number>((r) => child.once('message', (m) => r(m as number)));
  const serverCpu = (): Promise<number> =>
    new Promise((r) => {
      child.once('message', (m) => r((m as { cpu: number }).cpu));
      child.send('cpu');
    });
  let one: () => Promise<void>;
  let close: () => void;
  if (kind === 'raw') {
    const socket = net.connect(port, '127.0.0.1');
    socket.setNoDelay(true);
    await new Promise((r) => socket.once('connect', r));
    let waiting: (() => void) | undefined;
    let pending: Buffer = Buffer.alloc(0);
    socket.on('data', (chunk: Buffer) => {
      pending = pending.length === 0 ? chunk : Buffer.concat([pending, chunk]);
      while (pending.length >= 4 && pending.length >= 4 + pending.readUInt32BE(0)) {
        pending = pending.subarray(4 + pending.readUInt32BE(0));
        const w = waiting;
        waiting = undefined;
        w?.();
      }
    });
    one = () =>
      new Promise((resolve) => {
        waiting = resolve;
        const out = Buffer.alloc(4 + 300);
        out.writeUInt32BE(300, 0);
        socket.write(out);
      });
    close = () => socket.destroy();
  } else if (kind === 'h2') {
    const session = http2.connect(`http://127.0.0.1:${port}`);
    one = () =>
      new Promise((resolve) => {
        const st = session.request({ ':method': 'POST', ':path': '/RunnerProtocol/Engage', 'content-type': 'application/grpc', te: 'trailers' });
        st.on('data', () => undefined);
        st.on('close', resolve);
        st.end(Buffer.alloc(300));
      });
    close = () => session.close();
  } else {
    const agent = new http.Agent({ keepAlive: true, maxSockets: 1 });
    one = () =>
      new Promise((resolve) => {
        const q = http.request({ host: '127.0.0.1', port, method: 'POST', path: '/call', agent }, (r) => {
          r.resume();
          r.on('end', resolve);
        });
        q.end(Buffer.alloc(300));
      });
    close = () => agent.destroy();
  }
  try {
    for (let i = 0; i < 2000; i++) await one();
    const c0 = process.cpuUsage();
    const s0 = await serverCpu();
    const t0 = performance.now();
    for (let i = 0; i < N; i++) await one();
    const c = process.cpuUsage(c0);
    const s = (await serverCpu()) - s0;
    const seconds = (performance.now() - t0) / 1000;
    return `${kind.padEnd(5)} ${(N / seconds).toFixed(0).padStart(6)} req/s, one at a time; CPU per request: client ${((c.user + c.system) / N).toFixed(0)} us, server ${(s / N).toFixed(0)} us`;
  } finally {
    close();
    child.kill();
  }
}

if (process.argv[2] === 'server') serve(process.argv[3]!);
else {
  for (const kind of ['h2', 'http1', 'raw'] as const) process.stdout.write(`${await measure(kind)}\n`);
}
