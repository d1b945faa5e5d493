/**
 * What an open console costs the API: sync calls per second at 1 connection
 * to a hot function, with and without the console watching, on the same
 * server, in turns (without, streams, page, without, ...), so the machine's
 * drift hits every side alike; medians are reported. Sides:
 *   - without: nobody watches (the console's timer is stopped);
 *   - streams: two live streams read by scripts (the server's whole cost of
 *     two open consoles: the shared timer, the figures, the writes);
 *   - page: the overview open in headless chromium (its own stream) and one
 *     script stream; chromium runs on the same machine as the server and the
 *     load here, so this side also counts the browser's own CPU, which a
 *     real console spends on its user's machine. Skipped without chromium.
 *
 * And, robust to a busy machine (the calls/s of a shared 2-core box swing
 * by more than the console costs): the idle server's CPU without and with
 * two streams open, which is what the console adds to every second.
 *
 *   npm run bench:console     (BENCH_SECONDS=5 per round, BENCH_AB_ROUNDS=6, BENCH_IDLE_SECONDS=10, BENCH_IDLE_ROUNDS=4; goal: within 2%)
 */
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { Browser, Page } from 'playwright-core';
import { TEST_ADMIN_TOKEN } from '../test/support/auth.js';
import { CHROMIUM, launchChromium } from '../test/support/browser.js';
import { ensureFunctionImage, HELLO_FUNC_JS } from '../test/support/images.js';
import { startFnts } from '../test/support/process.js';
import { cannon, consoleStream as stream, cpuOf, fmt, json, median, type Figures } from './measure.mjs';

const SECONDS = Number(process.env['BENCH_SECONDS'] ?? 5);
const ROUNDS = Number(process.env['BENCH_AB_ROUNDS'] ?? 6);
const IDLE_SECONDS = Number(process.env['BENCH_IDLE_SECONDS'] ?? 10);
const IDLE_ROUNDS = Number(process.env['BENCH_IDLE_ROUNDS'] ?? 4);
const say = (line: string): boolean => process.stdout.write(line + '\n');

async function main(): Promise<void> {
  process.stderr.write('bench: building the hello image...\n');
  const image = await ensureFunctionImage('hello', HELLO_FUNC_JS);
  const dataDir = mkdtempSync(join(tmpdir(), 'fnts-bench-console-'));
  const fnts = await startFnts({ FN_DB_URL: `sqlite3://${join(dataDir, 'fn.db')}`, FN_LOG_LEVEL: 'info' });
  let browser: Browser | undefined;
  try {
    const app = await json(`${fnts.url}/v2/apps`, { name: 'bench' });
    const fn = await json(`${fnts.url}/v2/fns`, { app_id: app.id, name: 'hello', image });
    const url = `${fnts.url}/invoke/${fn.id}`;
    const withBrowser = existsSync(CHROMIUM);
    if (withBrowser) browser = await launchChromium();
    const body = JSON.stringify({ name: 'bench' });
    const load = (seconds: number): Promise<Figures> => cannon({ url, body, seconds, connections: 1, pids: [fnts.proc.pid!] });

    /** Opens the console: script streams, and the overview in chromium when `page`; answers how to close it (and how many events were read). */
    const openConsole = async (page: boolean): Promise<() => Promise<number>> => {
      const streams = [await stream(fnts.url)];
      let tab: Page | undefined;
      if (page && browser) {
        const context = await browser.newContext();
        await context.addInitScript({ content: `sessionStorage.setItem('fnts.console.token', ${JSON.stringify(TEST_ADMIN_TOKEN)})` });
        tab = await context.newPage();
        await tab.goto(`${fnts.url}/ui#/`);
        await tab.getByText('live, updated').waitFor();
      } else streams.push(await stream(fnts.url));
      return async () => {
        const events = streams.reduce((n, s) => n + s.events(), 0);
        for (const s of streams) s.stop();
        await tab?.context().close();
        return events;
      };
    };
    const watched = async (page: boolean): Promise<Figures> => {
      const close = await openConsole(page);
      let figures: Figures;
      try {
        figures = await load(SECONDS);
      } finally {
        events += await close();
      }
      return figures;
    };

    // The console's own cost, robust to a busy machine: the server's CPU while no call runs, without and with two streams open.
    const idleCpu = async (streamsOpen: boolean): Promise<number> => {
      const close = streamsOpen ? await openConsole(false) : undefined;
      const pid = fnts.proc.pid!;
      const cpu0 = cpuOf(pid);
      const t0 = performance.now();
      await new Promise((r) => setTimeout(r, IDLE_SECONDS * 1000));
      const msPerS = (cpuOf(pid) - cpu0) / 1000 / ((performance.now() - t0) / 1000);
      await close?.();
      return msPerS;
    };
    process.stderr.write(`bench: the idle server's CPU, ${IDLE_ROUNDS} rounds of ${IDLE_SECONDS} s without and with two streams open, in turns...\n`);
    const idleSides: [number[], number[]] = [[], []];
    for (let r = 0; r < IDLE_ROUNDS; r++) {
      idleSides[0].push(await idleCpu(false));
      idleSides[1].push(await idleCpu(true));
    }
    const idleWithout = median(idleSides[0]);
    const idleWith = median(idleSides[1]);

    process.stderr
      .write(`bench: warming up; then ${ROUNDS} rounds of ${SECONDS} s in turns: without the console, with two streams${withBrowser ? ', with the overview in chromium' : ' (chromium is not installed: no page side)'}...
`);
    await load(3);
    const without: Figures[] = [];
    const streams: Figures[] = [];
    const pages: Figures[] = [];
    let events = 0;
    for (let r = 0; r < ROUNDS; r++) {
      without.push(await load(SECONDS));
      streams.push(await watched(false));
      if (withBrowser) pages.push(await watched(true));
    }
    const side = (xs: Figures[]) => ({ rps: median(xs.map((x) => x.rps)), p50: median(xs.map((x) => x.p50)), p99: median(xs.map((x) => x.p99)), cpuUs: median(xs.map((x) => x.cpuUs ?? NaN)) });
    const a = side(without);
    const line = (label: string, f: ReturnType<typeof side>): string => `${label} ${fmt(f.rps)} calls/s, p50 ${f.p50} ms, p99 ${f.p99} ms, server CPU ${fmt(f.cpuUs)} us/call`;
    const cost = (xs: Figures[]): string => {
      const costs = without.map((w, r) => (100 * (w.rps - xs[r]!.rps)) / w.rps);
      return `with/without ${fmt(side(xs).rps / a.rps, 4)}; cost per round ${costs.map((c) => fmt(c, 1) + '%').join(' ')}, median ${fmt(median(costs), 2)}%`;
    };
    say(`== the console's cost to sync calls, 1 connection, FDK hello, ${ROUNDS} rounds of ${SECONDS} s in turns (medians; goal: within 2%)`);
    say(line('without the console:        ', a));
    say(line('two streams open:           ', side(streams)) + ` -- ${cost(streams)}`);
    if (withBrowser) say(line('overview in chromium + one: ', side(pages)) + ` -- ${cost(pages)} (chromium's own CPU included)`);
    say(`(${events} stream events read)`);
    say(
      `idle server CPU (medians of ${IDLE_ROUNDS} rounds in turns: without ${idleSides[0].map((x) => fmt(x, 1)).join(' ')}, with ${idleSides[1].map((x) => fmt(x, 1)).join(' ')}): ${fmt(idleWithout, 2)} ms/s without, ${fmt(idleWith, 2)} ms/s with two streams open: the console costs ${fmt(idleWith - idleWithout, 2)} ms of CPU per second, ` +
        `${fmt((100 * (idleWith - idleWithout)) / 1000 / ((a.rps * a.cpuUs) / 1e6), 2)}% of the CPU the server spends on calls at 1 connection (${fmt(a.rps)} calls/s x ${fmt(a.cpuUs)} us)`,
    );
  } finally {
    await browser?.close();
    await fnts.stop();
    rmSync(dataDir, { recursive: true, force: true });
  }
}

await main();
