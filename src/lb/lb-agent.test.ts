/**
 * The LB's handling of a fn's secrets, against runner doubles: what goes in
 * the TryCall, to which runners, and with which version.
 */
import { pino } from 'pino';
import { describe, expect, it } from 'vitest';
import { callFromJson } from '../models/index.js';
import { SECRETS_FIELD, type Attempt, type EngageRequest } from '../rpc/index.js';
import { LbAgent } from './lb-agent.js';
import { createPlacer } from './placers.js';
import { StaticPool, type RunnerConnection } from './pool.js';

/** A runner that cannot be reached: it records what it was sent, and the call ends at once (no runner reachable). */
class Unreachable implements RunnerConnection {
  readonly sent: EngageRequest[] = [];
  reachable = true;

  constructor(
    readonly address: string,
    readonly secure: boolean,
  ) {}

  async engage(request: EngageRequest): Promise<Attempt> {
    this.sent.push(request);
    this.reachable = false;
    return { kind: 'failed', reason: 'down' };
  }

  close(): void {}
}

const log = pino({ level: 'silent' });

function agent(runner: Unreachable, now: { version: string; values: Record<string, string> }): LbAgent {
  return new LbAgent({ pool: new StaticPool([runner]), placer: createPlacer('naive'), log, secrets: { current: async () => now } });
}

const call = (secretsVersion?: string) => callFromJson({ id: 'c1', app_id: 'a1', fn_id: 'f1', image: 'img:1', timeout: 5, ...(secretsVersion ? { secrets_version: secretsVersion } : {}) });

describe('LbAgent and secrets', () => {
  it("sends a fn's secrets to a secure runner, with the version of the values sent", async () => {
    const runner = new Unreachable('10.0.0.1:9190', true);
    const running = agent(runner, { version: 'bb', values: { TOKEN: 'v2' } }).invoke(call('aa'), null);
    await expect(running.response).rejects.toThrow();
    const sent = JSON.parse(runner.sent[0]!.callJson);
    // Changed since the lookup (a detached call that waited): the values of now, under their version.
    expect(sent[SECRETS_FIELD]).toEqual({ TOKEN: 'v2' });
    expect(sent.secrets_version).toBe('bb');
    expect(runner.sent[0]!.call.fn.secretsVersion).toBe('bb');
  });

  it('sends none (nor a version) once they are deleted, and none for a fn without', async () => {
    for (const version of ['aa', undefined]) {
      const runner = new Unreachable('10.0.0.1:9190', true);
      const running = agent(runner, { version: '', values: {} }).invoke(call(version), null);
      await expect(running.response).rejects.toThrow();
      const sent = JSON.parse(runner.sent[0]!.callJson);
      expect(sent).not.toHaveProperty(SECRETS_FIELD);
      expect(sent).not.toHaveProperty('secrets_version');
    }
  });

  it('fails the call (500, naming FNTS_GRPC_TLS_*) rather than send secrets in plaintext on the network', async () => {
    const runner = new Unreachable('10.0.0.1:9190', false);
    const running = agent(runner, { version: 'aa', values: { TOKEN: 'v1' } }).invoke(call('aa'), null);
    await expect(running.response).rejects.toThrow(/FNTS_GRPC_TLS_CERT, FNTS_GRPC_TLS_KEY and FNTS_GRPC_TLS_CA/);
    const outcome = await running.outcome;
    expect(outcome.httpStatus).toBe(500);
    expect(outcome.error).not.toContain('v1');
    expect(runner.sent).toEqual([]);
  });
});
