/**
 * Debian's chromium, driven by playwright-core (no browser is downloaded).
 * Where it is not installed the browser tests are skipped with a message
 * saying how to get it, except under CI=true, where they fail instead:
 * .ci/run installs it, so its absence there is a fault.
 */
import { existsSync } from 'node:fs';
import { chromium, type Browser, type BrowserContext, type BrowserContextOptions, type Page } from 'playwright-core';
import { TEST_ADMIN_TOKEN } from './auth.js';

export const CHROMIUM = process.env['FNTS_TEST_CHROMIUM'] ?? '/usr/bin/chromium';

/** Whether the browser tests can run here; throws under CI=true when they cannot. */
export function chromiumAvailable(): boolean {
  if (existsSync(CHROMIUM)) return true;
  const why = `${CHROMIUM} is not installed: the console's browser tests need Debian's chromium (apt-get install chromium, as .ci/run does)`;
  if (process.env['CI'] === 'true') throw new Error(why);
  process.stderr.write(`skipping the browser tests: ${why}\n`);
  return false;
}

export function launchChromium(): Promise<Browser> {
  // --no-sandbox: the tests run as root in a container, where chromium's sandbox cannot start.
  return chromium.launch({ executablePath: CHROMIUM, args: ['--no-sandbox', '--disable-dev-shm-usage'] });
}

/** What a page said was wrong: console errors and uncaught exceptions, as they come. */
export function pageErrors(page: Page): string[] {
  const errors: string[] = [];
  page.on('console', (m) => {
    if (m.type() === 'error') errors.push(`console: ${m.text()} (${m.location().url})`);
  });
  page.on('pageerror', (e) => errors.push(`page: ${e.message}`));
  return errors;
}

/** A context whose tabs are signed in to the console as the test admin: the token is in each tab's session storage (ui/api.ts). */
export async function signedInContext(browser: Browser, options: BrowserContextOptions = {}): Promise<BrowserContext> {
  const context = await browser.newContext(options);
  await context.addInitScript({ content: `sessionStorage.setItem('fnts.console.token', ${JSON.stringify(TEST_ADMIN_TOKEN)})` });
  return context;
}
