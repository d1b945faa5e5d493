/**
 * The console's Fleet view in a real browser against a real fleet: an API
 * node whose FNTS_CONSOLE_FLEET names a pure runner (real containers), the
 * LB in front of it, a pool manager, and a node nobody answers at. A call
 * through the LB shows on the runner's figures while it runs and after; the
 * node that is not there is said to be not reachable, in words.
 */
import { mkdirSync } from 'node:fs';
import { join } from 'node:path';
import type { Browser, Page } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { chromiumAvailable, launchChromium, pageErrors, signedInContext } from '../support/browser.js';
import { freePort } from '../support/fnserver.js';
import { probeImage } from '../support/functions.js';
import { startTestServer, type TestServer } from '../support/server.js';

const SHOTS = join(process.cwd(), 'test-results', 'console');
/** Port 1 on loopback: nothing listens there. */
const NOBODY = 'http://127.0.0.1:1';

describe.skipIf(!chromiumAvailable())('the Fleet view in a browser, on a real fleet', () => {
  let api: TestServer;
  let runner: TestServer;
  let lb: TestServer;
  let manager: TestServer;
  let browser: Browser;
  let page: Page;
  let errors: string[];
  let fnId: string;

  beforeAll(async () => {
    mkdirSync(SHOTS, { recursive: true });
    const [image, lbPort] = await Promise.all([probeImage(), freePort()]);
    [runner, manager, browser] = await Promise.all([
      startTestServer({ FN_NODE_TYPE: 'pure-runner', FN_GRPC_PORT: '0' }),
      // A pool manager that starts no runner until an LB asks (none does here): its groups are none yet.
      startTestServer({ FN_NODE_TYPE: 'poolmanager', FN_GRPC_PORT: '0', FNTS_MIN_RUNNERS: '0', FNTS_POOL_NAME: `fleet-view-${process.pid}`, FNTS_POOL_IOFS_PATH: `/tmp/fnts-fv-${process.pid}` }),
      launchChromium(),
    ]);
    // The LB starts after the API node (it reads fns from it), so its port is chosen now for the API node's list.
    api = await startTestServer({ FN_NODE_TYPE: 'api', FNTS_CONSOLE_FLEET: [runner.url, `http://127.0.0.1:${lbPort}`, manager.url, NOBODY].join(',') });
    lb = await startTestServer({ FN_NODE_TYPE: 'lb', FN_PORT: String(lbPort), FN_RUNNER_API_URL: api.url, FN_RUNNER_ADDRESSES: `127.0.0.1:${runner.server.grpcPort}` });
    fnId = (await api.fn(await api.app(), image, { memory: 128 })).id;
    page = await (await signedInContext(browser, { viewport: { width: 1280, height: 900 } })).newPage();
    page.setDefaultTimeout(10_000);
    errors = pageErrors(page);
  });
  afterAll(async () => {
    await browser?.close();
    await lb?.close();
    await runner?.close();
    await manager?.close();
    await api?.close();
  });

  const region = (url: string) => page.getByRole('region', { name: url, exact: true });

  it("shows the runner's calls, memory and containers live, the LB's runners, and the node that does not answer", async () => {
    await page.goto(`${api.url}/ui#/fleet`);
    await page.getByRole('heading', { name: 'Fleet', exact: true }).waitFor();
    const r = region(runner.url);
    await r.getByText('pure-runner', { exact: true }).waitFor();
    await r.getByText(/^Up, answered at /).waitFor();
    expect(await r.getByLabel('Calls running').textContent()).toBe('0');
    expect(await r.getByLabel('Containers busy').textContent()).toBe('0');

    // One call through the LB, running for a while: the runner's figures show it within the view's 2 s.
    const call = lb.invoke(fnId, { sleep: 6000 });
    try {
      await expect.poll(() => r.getByLabel('Calls running').textContent(), { timeout: 15_000 }).toBe('1');
      expect(await r.getByLabel('Containers busy').textContent()).toBe('1');
      // Its container's 128 MiB are reserved of the runner's memory.
      expect(await r.getByLabel('Memory used').textContent()).toMatch(/^128\.0 MiBof [\d.]+ [MG]iB$/);
      await page.screenshot({ path: join(SHOTS, 'fleet-live.png'), fullPage: true });
    } finally {
      expect((await call).status).toBe(200);
    }
    await expect.poll(() => r.getByLabel('Calls running').textContent(), { timeout: 10_000 }).toBe('0');
    // The container stays, idle or frozen, for the next call.
    const left = async (): Promise<number> => Number(await r.getByLabel('Containers idle').textContent()) + Number(await r.getByLabel('Containers paused').textContent());
    await expect.poll(left).toBe(1);

    const l = region(lb.url);
    await l.getByText('lb', { exact: true }).waitFor();
    const row = l.getByRole('table', { name: `Runners of ${lb.url}` }).getByRole('row', { name: new RegExp(`127\\.0\\.0\\.1:${runner.server.grpcPort}`) });
    expect(await row.getByRole('cell').allTextContents()).toEqual([`127.0.0.1:${runner.server.grpcPort}`, 'places calls', '1']);
    // An LB runs no containers: it shows none of a runner's figures, rather than zeros.
    expect(await l.getByLabel('Calls running').count()).toBe(0);

    const m = region(manager.url);
    await m.getByText('poolmanager', { exact: true }).waitFor();
    await m.getByText('It has no runner group yet (a group appears when an LB asks for it).').waitFor();
    await m.getByText('LBs advertising to it: 0.').waitFor();

    const gone = region(NOBODY);
    await gone.getByText('not reachable: connect ECONNREFUSED 127.0.0.1:1 (it has not answered since this node started)').waitFor();
    await gone.getByText('Its figures are not known while it does not answer.').waitFor();
    await page.getByText('4 nodes named by FNTS_CONSOLE_FLEET; 1 not answering.').waitFor();
    expect(errors).toEqual([]);
  });

  it('an API node without FNTS_CONSOLE_FLEET says how to name its fleet', async () => {
    const alone = await startTestServer({ FN_NODE_TYPE: 'api' });
    const context = await signedInContext(browser);
    try {
      const p = await context.newPage();
      await p.goto(`${alone.url}/ui#/fleet`);
      await p.getByText('This api node does not know its LBs, runners or pool manager', { exact: false }).waitFor();
      await p.getByText('FNTS_CONSOLE_FLEET=http://lb-1:8080,http://runner-1:8080,http://poolmanager:8080', { exact: true }).waitFor();
      expect(await p.getByRole('region').count()).toBe(1);
    } finally {
      // The browser's sockets to it go first: one left open would keep the closing server waiting for its request.
      await context.close();
      await alone.close();
    }
  });

  it('reads in a narrow window', async () => {
    await page.setViewportSize({ width: 390, height: 844 });
    await region(runner.url).getByLabel('Memory used').waitFor();
    expect(await page.evaluate('document.documentElement.scrollWidth <= window.innerWidth')).toBe(true);
    await page.screenshot({ path: join(SHOTS, 'fleet-narrow.png'), fullPage: true });
  });
});
