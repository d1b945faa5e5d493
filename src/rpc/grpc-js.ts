/**
 * Binding and stopping a grpc-js server, as the pool manager's is (the
 * runner's server is on node:http2: h2-server.ts).
 */
import * as grpc from '@grpc/grpc-js';

/** Binds `host:port` (port 0: any free port) and answers with the port bound; the error says which variable sets it. */
export function bindServer(server: grpc.Server, host: string, port: number, credentials: grpc.ServerCredentials | undefined, variable = 'FN_GRPC_PORT'): Promise<number> {
  return new Promise((resolve, reject) => {
    server.bindAsync(`${host.includes(':') ? `[${host}]` : host}:${port}`, credentials ?? grpc.ServerCredentials.createInsecure(), (err, bound) => {
      if (err) reject(new Error(`could not listen for gRPC on ${host}:${port}: ${err.message}; set ${variable} to a free port`));
      else resolve(bound);
    });
  });
}

/** Stops `server`: requests in flight get `graceMs`, then are cut. */
export function shutdownServer(server: grpc.Server, graceMs = 1000): Promise<void> {
  return new Promise<void>((resolve) => {
    const force = setTimeout(() => server.forceShutdown(), graceMs);
    server.tryShutdown(() => {
      clearTimeout(force);
      resolve();
    });
  });
}
