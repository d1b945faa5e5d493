import { describe, expect, it } from 'vitest';
import { Readiness, type HealthCheck } from './health.js';

const ok = (name: string): HealthCheck => ({ name, check: async () => undefined });
const failing = (name: string, message: string): HealthCheck => ({
  name,
  check: async () => {
    throw new Error(message);
  },
});

/** A log that keeps what it is told. */
function recorder(): { lines: Array<[string, unknown]>; log: { info: (...a: unknown[]) => void; warn: (...a: unknown[]) => void } } {
  const lines: Array<[string, unknown]> = [];
  return {
    lines,
    log: {
      info: (...a: unknown[]) => void lines.push(['info', a]),
      warn: (...a: unknown[]) => void lines.push(['warn', a]),
    },
  };
}

describe('Readiness', () => {
  it('is ready when every check answers, and says ok for each', async () => {
    expect(await new Readiness([ok('datastore'), ok('docker')]).check()).toEqual({ ready: true, checks: { datastore: 'ok', docker: 'ok' } });
    expect(await new Readiness([]).check()).toEqual({ ready: true, checks: {} });
  });

  it('is not ready when one check fails, naming what failed and keeping the others ok', async () => {
    const report = await new Readiness([ok('datastore'), failing('docker', 'the Docker engine does not answer: connect ENOENT')]).check();
    expect(report).toEqual({ ready: false, checks: { datastore: 'ok', docker: 'the Docker engine does not answer: connect ENOENT' } });
  });

  it('counts a check that throws before returning a promise as failed, not as a crash', async () => {
    const sync: HealthCheck = {
      name: 'datastore',
      check: () => {
        throw new Error('datastore is closed');
      },
    };
    expect(await new Readiness([sync]).check()).toEqual({ ready: false, checks: { datastore: 'datastore is closed' } });
  });

  it('bounds a hung check by the timeout, aborting its signal, and answers in time', async () => {
    let aborted: AbortSignal | undefined;
    const hung: HealthCheck = {
      name: 'docker',
      check: (signal) => {
        aborted = signal;
        return new Promise<void>((_resolve, reject) => signal.addEventListener('abort', () => reject(signal.reason as Error), { once: true }));
      },
    };
    const t0 = performance.now();
    const report = await new Readiness([hung, ok('datastore')], { timeoutMs: 30 }).check();
    expect(report).toEqual({ ready: false, checks: { docker: 'no answer within 30 ms', datastore: 'ok' } });
    expect(aborted?.aborted).toBe(true);
    expect(performance.now() - t0).toBeLessThan(1000);
  });

  it('logs a change of readiness once, not every probe', async () => {
    let down = false;
    const docker: HealthCheck = {
      name: 'docker',
      check: async () => {
        if (down) throw new Error('engine gone');
      },
    };
    const { lines, log } = recorder();
    const readiness = new Readiness([docker], { log });
    await readiness.check();
    expect(lines).toEqual([]);
    down = true;
    await readiness.check();
    await readiness.check();
    expect(lines).toEqual([['warn', [{ checks: { docker: 'engine gone' } }, 'not ready']]]);
    down = false;
    await readiness.check();
    await readiness.check();
    expect(lines.slice(1)).toEqual([['info', ['ready again']]]);
  });
});
