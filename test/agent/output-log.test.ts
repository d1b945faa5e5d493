/**
 * Function output in the server's log, on a real server with real
 * containers: each line a function writes reaches the log at info with the
 * ids that find it, and a flood is cut to a burst and one report while the
 * call succeeds and its own log keeps every line.
 */
import { pino } from 'pino';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { LINE_BURST } from '../../src/agent/log-limit.js';
import { probeImage } from '../support/functions.js';
import { startTestServer, type TestServer } from '../support/server.js';
import { eventually } from '../support/wait.js';

interface LogLine {
  level: number;
  msg: string;
  [key: string]: unknown;
}

describe('function output in the server log', () => {
  let s: TestServer;
  let app: any;
  const lines: LogLine[] = [];

  beforeAll(async () => {
    const logger = pino({ level: 'info' }, { write: (line: string) => void lines.push(JSON.parse(line) as LogLine) });
    s = await startTestServer({ FN_LOG_LEVEL: 'info' }, logger);
    app = await s.app();
  });
  afterAll(async () => {
    await s?.close();
  });

  it('logs each line a function writes at info, with app, fn, call and container ids and the stream', async () => {
    const fn = await s.fn(app, await probeImage());
    const res = await s.invoke(fn.id, { log: 'hello from the function' });
    expect(res.status).toBe(200);
    const call = res.headers.get('fn-call-id');
    const ours = (): LogLine[] => lines.filter((l) => l['call'] === call);
    expect(await eventually(() => ours().length >= 2, 5000)).toBe(true);
    expect(
      ours()
        .map(({ level, msg, app: a, fn: f, stream }) => ({ level, msg, app: a, fn: f, stream }))
        .sort((a, b) => a.msg.localeCompare(b.msg)),
    ).toEqual([
      { level: 30, msg: 'hello from the function (stderr)', app: app.id, fn: fn.id, stream: 'stderr' },
      { level: 30, msg: 'hello from the function (stdout)', app: app.id, fn: fn.id, stream: 'stdout' },
    ]);
    expect(ours()[0]!['container']).toMatch(/^[0-9a-z]{26}$/);
  });

  it('cuts a flood of 5,000 lines to the burst and one drop report, while the call succeeds and its log keeps every line', async () => {
    const fn = await s.fn(app, await probeImage());
    const res = await s.invoke(fn.id, { lines: 5000 });
    expect(res.status).toBe(200);
    const call = res.headers.get('fn-call-id')!;
    // The report comes once the container is under the limit again (its bucket full, 2 s on).
    const report = (): LogLine | undefined => lines.find((l) => l.level === 40 && l['fn'] === fn.id && typeof l['dropped'] === 'number');
    expect(await eventually(() => report() !== undefined, 10_000)).toBe(true);
    const logged = lines.filter((l) => l['call'] === call && /^line \d+$/.test(l.msg));
    expect(logged.length).toBeGreaterThan(0);
    expect(logged.length).toBeLessThanOrEqual(LINE_BURST);
    expect(logged.every((l) => l.level === 30)).toBe(true);
    expect(report()).toMatchObject({ app: app.id, fn: fn.id, container: logged[0]!['container'], dropped: 5000 - logged.length });
    expect(lines.filter((l) => l.level === 40 && l['fn'] === fn.id)).toHaveLength(1);

    let log = '';
    const stored = await eventually(async () => {
      const got = await s.call(`/v2/fns/${fn.id}/calls/${call}/log`, { method: 'GET' });
      log = got.json?.log ?? '';
      return got.status === 200;
    }, 5000);
    expect(stored).toBe(true);
    expect(log.split('\n').filter((l) => /^line \d+$/.test(l))).toHaveLength(5000);
    expect(log).toContain('line 4999\n');
  });
});
