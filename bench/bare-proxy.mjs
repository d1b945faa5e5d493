// The bare proxy: the least a reverse proxy in Node does to put a function
// container behind HTTP. It forwards each request to the container's socket
// (argv[2]) over a keep-alive agent and answers with the container's reply;
// it prints the port it listens on. bench/invoke.mts measures fnts against it.
import { Agent, createServer, request } from 'node:http';

const socketPath = process.argv[2];
const agent = new Agent({ keepAlive: true, maxSockets: 64 });
const server = createServer((req, res) => {
  const upstream = request({ socketPath, agent, method: req.method, path: '/call', headers: req.headers }, (reply) => {
    res.writeHead(reply.statusCode ?? 502, reply.headers);
    reply.pipe(res);
  });
  upstream.on('error', () => {
    if (!res.headersSent) res.writeHead(502);
    res.end();
  });
  req.pipe(upstream);
});
server.listen(0, '127.0.0.1', () => process.stdout.write(`${server.address().port}\n`));
process.on('SIGTERM', () => server.close(() => process.exit(0)));
