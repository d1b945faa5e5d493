/**
 * The console (/ui) in a real browser against a real server with real
 * functions, found as a person finds things (by role and label). One
 * server and one browser for the whole file: each test goes on from where
 * the one before it left (the app and fn it made), as a person would.
 * Screenshots of each view go to test-results/console/ (not committed).
 */
import { mkdirSync } from 'node:fs';
import { join } from 'node:path';
import type { Browser, BrowserContext, Page } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { bearer, TEST_ADMIN_TOKEN } from '../support/auth.js';
import { chromiumAvailable, launchChromium, pageErrors, signedInContext } from '../support/browser.js';
import { probeImage } from '../support/functions.js';
import { startTestServer, type TestServer } from '../support/server.js';

const SHOTS = join(process.cwd(), 'test-results', 'console');

describe.skipIf(!chromiumAvailable())('the console in a browser', () => {
  let s: TestServer;
  let browser: Browser;
  let admin: BrowserContext;
  let page: Page;
  let errors: string[];
  let image: string;
  /** What the tests make as they go. */
  const made: { appId?: string; fnId?: string; callId?: string } = {};

  const shot = (name: string): Promise<Buffer> => page.screenshot({ path: join(SHOTS, `${name}.png`), fullPage: true });
  const open = async (hash: string): Promise<void> => {
    await page.goto(`${s.url}/ui#${hash}`);
  };

  beforeAll(async () => {
    mkdirSync(SHOTS, { recursive: true });
    [s, browser, image] = await Promise.all([startTestServer(), launchChromium(), probeImage()]);
    // As if the admin had signed in in this tab: the token is in its session storage.
    admin = await signedInContext(browser, { viewport: { width: 1280, height: 800 } });
    page = await admin.newPage();
    page.setDefaultTimeout(10_000);
    errors = pageErrors(page);
  });
  afterAll(async () => {
    await browser?.close();
    await s?.close();
  });

  it('creates an app and a function through the UI, and the API shows them', async () => {
    await open('/apps');
    await expect.poll(() => page.getByText('No apps yet').isVisible()).toBe(true);
    await page.getByLabel('App name').fill('console-app');
    await page.getByRole('button', { name: 'Create app' }).click();
    await page.getByRole('heading', { name: 'console-app' }).waitFor();
    await page.getByText('No functions yet').waitFor();
    await page.getByLabel('Function name').fill('probe');
    await page.getByLabel('Image').fill(image);
    await page.getByLabel('Memory (MB)').fill('128');
    await page.getByRole('button', { name: 'Create function' }).click();
    await page.getByRole('heading', { name: 'probe' }).waitFor();

    const apps = (await s.call('/v2/apps?name=console-app', { method: 'GET' })).json;
    expect(apps.items).toHaveLength(1);
    made.appId = apps.items[0].id;
    const fns = (await s.call(`/v2/fns?app_id=${made.appId}`, { method: 'GET' })).json;
    expect(fns.items).toMatchObject([{ name: 'probe', image, memory: 128 }]);
    made.fnId = fns.items[0].id;
    expect(page.url()).toContain(`#/fns/${made.fnId}`);
  });

  it('the invoke panel runs a real call and shows its status, answer, call id and that it was cold', async () => {
    await page.getByLabel('Request body').fill('{"log":"hello from the console"}');
    await page.getByRole('button', { name: 'Invoke', exact: true }).click();
    const result = page.getByRole('region', { name: 'Invoke result' });
    await result.waitFor({ timeout: 20_000 });
    expect(await result.getByLabel('Status').textContent()).toBe('200');
    const answer = JSON.parse((await result.getByLabel('Answer').textContent())!);
    expect(answer.body).toEqual({ log: 'hello from the console' });
    // The console's token is not handed to a function that does not ask for one.
    expect(JSON.stringify(answer)).not.toContain(TEST_ADMIN_TOKEN);
    made.callId = (await result.getByRole('link', { name: 'Call id' }).textContent())!;
    expect(made.callId).toBe(answer.callId ?? made.callId);
    expect(made.callId).toMatch(/^[0-9A-Z]{26}$/);
    await result.getByText('cold (started a container)').waitFor();
    // The commands to run the same call from a shell.
    expect(await page.getByLabel('curl command', { exact: true }).textContent()).toContain(`/invoke/${made.fnId}`);
    expect(await page.getByLabel('fn invoke command', { exact: true }).textContent()).toContain('fn invoke console-app probe');
    await shot('function');
  });

  it('the call is in the calls view, and one click opens its record and log', async () => {
    await page.getByRole('navigation', { name: 'Function' }).getByRole('link', { name: 'Calls' }).click();
    const link = page.getByRole('table', { name: 'Calls' }).getByRole('link', { name: made.callId! });
    await link.waitFor();
    // Filtered by status: none failed; the filter is in the URL (a link to share).
    await page.getByLabel('Status', { exact: true }).selectOption('error');
    await page.getByText('No calls match these filters').waitFor();
    expect(page.url()).toContain('?status=error');
    await page.getByLabel('Status', { exact: true }).selectOption('success');
    await link.waitFor();
    await shot('calls');
    await link.click();
    await page.getByRole('heading', { name: `Call ${made.callId}` }).waitFor();
    expect(await page.getByLabel('Call status').textContent()).toBe('success');
    await expect.poll(() => page.getByLabel('Log').textContent()).toContain('hello from the console');
    await shot('call');
  });

  it('a dead detached call shows its attempts, and Retry runs it again', async () => {
    const fn = await s.post('/v2/fns', { app_id: made.appId, name: 'dies', image, annotations: { 'fnts.io/async-max-attempts': 1 } });
    const accepted = await s.invoke(fn.id, { exit: 3 }, { 'Fn-Invoke-Type': 'detached' });
    expect(accepted.status).toBe(202);
    const callId = accepted.headers.get('fn-call-id')!;
    const record = async (): Promise<any> => (await s.call(`/v2/fns/${fn.id}/calls/${callId}`, { method: 'GET' })).json;
    await expect.poll(async () => (await record())?.status, { timeout: 20_000 }).toBe('error');
    const dead = await record();

    await open(`/fns/${fn.id}/calls/${callId}`);
    expect(await page.getByLabel('Attempts').textContent()).toBe('1');
    await page.getByRole('button', { name: 'Retry' }).click();
    await page.getByText('Queued to run again.').waitFor();
    // It ran again: a newer start (and, the function still exiting, dead again after its one attempt).
    await expect.poll(async () => ((r) => r.status === 'error' && r.started_at > dead.started_at)(await record()), { timeout: 20_000 }).toBe(true);
  });

  it("the overview's calls per second rise while a load runs", async () => {
    await open('/');
    const calls = page.getByLabel('Calls per second', { exact: true });
    await expect.poll(() => calls.textContent()).toBe('0.0');
    let running = true;
    const load = Promise.all(
      [0, 1, 2].map(async () => {
        while (running) await s.invoke(made.fnId!, {});
      }),
    );
    try {
      await expect.poll(async () => Number(await calls.textContent()), { timeout: 10_000 }).toBeGreaterThan(1);
      // Let the charts draw a few points of it for the picture.
      await page.waitForTimeout(4000);
      await shot('overview');
    } finally {
      running = false;
      await load;
    }
  });

  it('every view loads without errors, links deep, and the back button works', async () => {
    // From here on: the dead call's page before asked for its log, which it has none of (404, shown as such).
    errors.length = 0;
    const views: Array<[string, string, string]> = [
      ['/', 'Overview', 'overview-idle'],
      ['/apps', 'Apps', 'apps'],
      [`/apps/${made.appId}`, 'console-app', 'app'],
      [`/apps/${made.appId}/triggers`, 'console-app', 'triggers'],
      [`/apps/${made.appId}/settings`, 'console-app', 'settings'],
      [`/fns/${made.fnId}`, 'probe', 'function-idle'],
      [`/fns/${made.fnId}/edit`, 'probe', 'function-edit'],
      [`/fns/${made.fnId}/calls`, 'Calls of probe', 'calls-list'],
      [`/fns/${made.fnId}/calls/${made.callId}`, `Call ${made.callId}`, 'call-record'],
      ['/fleet', 'Fleet', 'fleet'],
    ];
    for (const [hash, heading, name] of views) {
      await open(hash);
      await page.getByRole('heading', { name: heading, exact: true }).waitFor();
      await shot(name);
    }
    await page.goBack();
    await page.getByRole('heading', { name: `Call ${made.callId}` }).waitFor();
    expect(errors).toEqual([]);
  });

  it('makes a trigger with an endpoint to copy, edits the config, and deletes an app after asking', async () => {
    await open(`/apps/${made.appId}/triggers`);
    await page.getByLabel('Trigger name').fill('hello');
    await page.getByLabel('Function', { exact: true }).selectOption({ label: 'probe' });
    await page.getByLabel('Source path').fill('/hello');
    await page.getByRole('button', { name: 'Create trigger' }).click();
    const endpoint = page.getByLabel('Endpoint of hello', { exact: true });
    await endpoint.waitFor();
    expect(await endpoint.textContent()).toBe(`${s.url}/t/console-app/hello`);
    const triggers = (await s.call(`/v2/triggers?app_id=${made.appId}`, { method: 'GET' })).json;
    expect(triggers.items).toMatchObject([{ name: 'hello', source: '/hello', fn_id: made.fnId }]);

    await page.getByRole('link', { name: 'Settings' }).click();
    await page.getByLabel('Config (one KEY=value per line)').fill('LEVEL=debug');
    await page.getByRole('button', { name: 'Save app' }).click();
    await page.getByRole('status').getByText('Saved').waitFor();
    expect((await s.call(`/v2/apps/${made.appId}`, { method: 'GET' })).json.config).toEqual({ LEVEL: 'debug' });

    const doomed = await s.app({ name: 'doomed' });
    await open(`/apps/${doomed.id}/settings`);
    await page.getByRole('button', { name: 'Delete app' }).click();
    await page.getByRole('button', { name: 'Yes, delete app' }).click();
    await page.getByRole('heading', { name: 'Apps' }).waitFor();
    expect((await s.call(`/v2/apps/${doomed.id}`, { method: 'GET' })).status).toBe(404);
    // An API error is shown in Fn's words.
    await page.getByLabel('App name').fill('console-app');
    await page.getByRole('button', { name: 'Create app' }).click();
    await page.getByRole('alert').getByText('App already exists').waitFor();
    expect(errors.filter((e) => !e.includes('409'))).toEqual([]);
  });

  it('reads in a narrow window and in the system dark mode, and works from the keyboard', async () => {
    const phone = await signedInContext(browser, { viewport: { width: 390, height: 844 }, colorScheme: 'dark' });
    try {
      const p = await phone.newPage();
      const problems = pageErrors(p);
      await p.goto(`${s.url}/ui#/fns/${made.fnId}`);
      await p.getByRole('heading', { name: 'probe' }).waitFor();
      await p
        .getByText('live, updated')
        .or(p.getByRole('button', { name: 'Invoke', exact: true }))
        .first()
        .waitFor();
      // Nothing wider than the window: no sideways scrolling.
      expect(await p.evaluate('document.documentElement.scrollWidth <= window.innerWidth')).toBe(true);
      // Dark: the page's background is dark.
      const bg = String(await p.evaluate('getComputedStyle(document.body).backgroundColor'));
      expect(bg).toBe('rgb(21, 23, 27)');
      await p.screenshot({ path: join(SHOTS, 'function-narrow-dark.png'), fullPage: true });
      // From the keyboard: the skip link first, then Enter in a form submits it.
      await p.keyboard.press('Tab');
      expect(await p.evaluate('document.activeElement?.textContent')).toBe('Skip to content');
      await p.goto(`${s.url}/ui#/apps`);
      await p.getByLabel('App name').focus();
      await p.keyboard.type('typed-app');
      await p.keyboard.press('Enter');
      await p.getByRole('heading', { name: 'typed-app' }).waitFor();
      expect(problems).toEqual([]);
    } finally {
      await phone.close();
    }
  });

  it('asks for a token, then shows only the apps the token may see', async () => {
    await s.app({ name: 'theirs' });
    const res = await s.call('/v2/tokens', { body: { name: 'team', role: 'viewer', apps: ['console-app'] }, headers: { 'content-type': 'application/json', ...bearer() } });
    expect(res.status, res.text).toBe(200);
    const stranger = await browser.newContext();
    try {
      const p = await stranger.newPage();
      await p.goto(`${s.url}/`);
      expect(new URL(p.url()).pathname).toBe('/ui');
      await p.getByRole('heading', { name: 'Sign in' }).waitFor();
      await p.getByLabel('API token').fill('fnts_0000000000000000_wrongwrongwrongwrongwrongwrongwrongwrongwro');
      await p.getByRole('button', { name: 'Sign in' }).click();
      await p.getByRole('alert').waitFor();
      await p.getByLabel('API token').fill(res.json.token);
      await p.getByRole('button', { name: 'Sign in' }).click();
      await p.getByRole('heading', { name: 'Overview' }).waitFor();
      await p.getByRole('link', { name: 'Apps', exact: true }).click();
      const apps = p.getByRole('table', { name: 'Apps' });
      await apps.getByRole('link', { name: 'console-app' }).waitFor();
      expect(await apps.getByRole('link').allTextContents()).toEqual(['console-app']);
      await p.screenshot({ path: join(SHOTS, 'limited-token.png'), fullPage: true });
    } finally {
      await stranger.close();
    }
  });
});
