/**
 * Asks runners how many calls they have in flight, over Fn's runner
 * protocol (RunnerProtocol.Status): how the manager knows a new runner is
 * up, and a draining one is done. One channel per runner, kept while the
 * runner is known and closed when it is forgotten.
 */
import * as grpc from '@grpc/grpc-js';
import { runnerProtocol, type RunnerProtocolClient } from '../runner/index.js';

/** Calls in flight on the runner at `address`; rejects when it does not answer within the probe's time. */
export type StatusProbe = (address: string) => Promise<number>;

export class RunnerStatus {
  private readonly clients = new Map<string, RunnerProtocolClient>();

  constructor(
    private readonly credentials: grpc.ChannelCredentials = grpc.credentials.createInsecure(),
    private readonly timeoutMs = 2_000,
  ) {}

  readonly probe: StatusProbe = (address) => {
    let client = this.clients.get(address);
    if (!client) {
      const { Client } = runnerProtocol();
      client = new Client(address, this.credentials, { 'grpc.initial_reconnect_backoff_ms': 100, 'grpc.max_reconnect_backoff_ms': 1_000 });
      this.clients.set(address, client);
    }
    const c = client;
    return new Promise<number>((resolve, reject) => {
      c.Status({}, new grpc.Metadata(), { deadline: Date.now() + this.timeoutMs }, (err, status) => (err || !status ? reject(err ?? new Error('no status')) : resolve(status.active)));
    });
  };

  /** Closes the channel to a runner the manager no longer knows. */
  forget(address: string): void {
    this.clients.get(address)?.close();
    this.clients.delete(address);
  }

  close(): void {
    for (const c of this.clients.values()) c.close();
    this.clients.clear();
  }
}
