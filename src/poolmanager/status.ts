/**
 * Asks runners how many calls they have in flight, over Fn's runner
 * protocol (RunnerProtocol.Status, through the LB's RunnerClient): how the
 * manager knows a new runner is up, and a draining one is done. One
 * connection per runner, kept while the runner is known and closed when it
 * is forgotten.
 */
import { RunnerClient, type ChannelTls } from '../rpc/index.js';

/** Calls in flight on the runner at `address`; rejects when it does not answer within the probe's time. */
export type StatusProbe = (address: string) => Promise<number>;

export class RunnerStatus {
  private readonly clients = new Map<string, RunnerClient>();

  constructor(
    private readonly tls?: ChannelTls,
    private readonly timeoutMs = 2_000,
  ) {}

  readonly probe: StatusProbe = async (address) => {
    let client = this.clients.get(address);
    if (!client) {
      client = new RunnerClient(address, { tls: this.tls });
      this.clients.set(address, client);
    }
    return (await client.status(this.timeoutMs)).active;
  };

  /** Closes the connection to a runner the manager no longer knows. */
  forget(address: string): void {
    this.clients.get(address)?.close();
    this.clients.delete(address);
  }

  close(): void {
    for (const c of this.clients.values()) c.close();
    this.clients.clear();
  }
}
