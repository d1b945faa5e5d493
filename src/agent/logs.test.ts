/**
 * A container's output in the server's log: each line at info with the ids
 * that find it, paced per container, the drop reported; the call's own log
 * keeps everything regardless.
 */
import { pino } from 'pino';
import { describe, expect, it } from 'vitest';
import { ManualClock } from './clock.js';
import { LINE_BURST } from './log-limit.js';
import { CallLog, ContainerOutput } from './logs.js';
import { functionSpec } from './spec.js';

const spec = functionSpec({
  appId: 'APP1',
  appName: 'shop',
  fnId: 'FN1',
  fnName: 'cart',
  image: 'fnts-test/cart',
  format: 'http-stream',
  memoryMB: 128,
  cpuMillis: 0,
  timeoutS: 30,
  idleTimeoutS: 30,
  tmpfsMB: 0,
  config: {},
  annotations: {},
  syslogUrl: undefined,
  runnerGroup: 'default',
});

interface Line {
  level: number;
  msg: string;
  [key: string]: unknown;
}

function output(level = 'info'): { lines: Line[]; clock: ManualClock; out: ContainerOutput } {
  const lines: Line[] = [];
  const logger = pino({ level }, { write: (line: string) => void lines.push(JSON.parse(line) as Line) });
  const clock = new ManualClock();
  return { lines, clock, out: new ContainerOutput(logger, clock, spec, 'c1') };
}

const write = (stream: NodeJS.WritableStream, text: string): Promise<void> => new Promise((resolve) => stream.write(text, () => resolve()));

describe('ContainerOutput in the server log', () => {
  it('logs each line at info, with app, fn, container and call ids and the stream', async () => {
    const { lines, out } = output();
    out.begin('CALL1', undefined);
    await write(out.stdout, 'hello\nwor');
    await write(out.stderr, 'oops\n');
    await write(out.stdout, 'ld\n');
    expect(lines.map(({ level, msg, app, fn, container, call, stream }) => ({ level, msg, app, fn, container, call, stream }))).toEqual([
      { level: 30, msg: 'hello', app: 'APP1', fn: 'FN1', container: 'c1', call: 'CALL1', stream: 'stdout' },
      { level: 30, msg: 'oops', app: 'APP1', fn: 'FN1', container: 'c1', call: 'CALL1', stream: 'stderr' },
      { level: 30, msg: 'world', app: 'APP1', fn: 'FN1', container: 'c1', call: 'CALL1', stream: 'stdout' },
    ]);
  });

  it('tags output trailing a call with its id for LOG_GRACE_MS, whether or not its log is kept, and output after that with none', async () => {
    const { lines, out } = output();
    out.begin('CALL2', undefined);
    out.end();
    await write(out.stderr, 'trailing\n');
    // The grace runs on real time (one sweep for every container).
    const until = Date.now() + 2000;
    while (out.callId !== undefined && Date.now() < until) await new Promise((r) => setTimeout(r, 20));
    await write(out.stderr, 'idle\n');
    expect(lines.map((l) => [l.msg, l['call']])).toEqual([
      ['trailing', 'CALL2'],
      ['idle', undefined],
    ]);
  });

  it('logs a character cut between two chunks of output whole', async () => {
    const { lines, out } = output();
    const bytes = Buffer.from('prix: 5 €, 😀\n');
    // Cut inside the euro sign (3 bytes) and inside the emoji (4 bytes).
    const euro = bytes.indexOf(Buffer.from('€'));
    const smile = bytes.indexOf(Buffer.from('😀'));
    for (const [from, to] of [
      [0, euro + 1],
      [euro + 1, smile + 2],
      [smile + 2, bytes.length],
    ] as const) {
      await new Promise<void>((resolve) => out.stdout.write(bytes.subarray(from, to), () => resolve()));
    }
    expect(lines.map((l) => l.msg)).toEqual(['prix: 5 €, 😀']);
  });

  it('caps a line at 8 KiB, and logs an unfinished last line when the container ends', async () => {
    const { lines, out } = output();
    await write(out.stdout, `${'x'.repeat(20_000)}\nlast words`);
    out.finish();
    expect(lines.map((l) => l.msg)).toEqual([`${'x'.repeat(8192)}...`, 'last words']);
  });

  it('drops lines past the burst from the server log only, and says how many at warn once the container ends', async () => {
    const { lines, out } = output();
    const log = new CallLog(1 << 20);
    out.begin('FLOOD', log);
    await write(out.stderr, Array.from({ length: 1000 }, (_, i) => `line ${i}\n`).join(''));
    out.finish();
    const info = lines.filter((l) => l.level === 30);
    expect(info).toHaveLength(LINE_BURST);
    expect(info.at(-1)!.msg).toBe(`line ${LINE_BURST - 1}`);
    const warn = lines.filter((l) => l.level === 40);
    expect(warn).toEqual([expect.objectContaining({ dropped: 1000 - LINE_BURST, container: 'c1', fn: 'FN1', app: 'APP1' })]);
    expect(warn[0]!.msg).toMatch(/^dropped 800 lines of this container's output/);
    // The call's own log has every line.
    expect((await log.closed).split('\n').filter(Boolean)).toHaveLength(1000);
  });

  it('reports the drop once the container is under the limit again, and logs its lines again', async () => {
    const { lines, clock, out } = output();
    await write(out.stdout, 'x\n'.repeat(LINE_BURST + 50));
    clock.advance(2000);
    expect(lines.filter((l) => l.level === 40).map((l) => l.dropped)).toEqual([50]);
    await write(out.stdout, 'back\n');
    expect(lines.at(-1)).toMatchObject({ level: 30, msg: 'back' });
  });

  it('with info off, neither lines nor drop reports reach the log', async () => {
    const { lines, out } = output('warn');
    await write(out.stdout, 'x\n'.repeat(1000));
    out.finish();
    expect(lines).toEqual([]);
  });
});
