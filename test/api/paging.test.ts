/**
 * Page cursors: a cursor fnts handed out takes the listing on exactly where
 * it stopped; anything else (junk, a cursor tampered with, a cursor of
 * another listing) is refused with Fn's 400 "Invalid cursor" instead of
 * silently answering some page.
 */
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { startApi, type TestApi } from '../support/api.js';

let api: TestApi;
let app: any;
let fn: any;
beforeEach(async () => {
  api = await startApi();
  for (const name of ['a-1', 'a-2', 'a-3']) await api.createApp({ name });
  app = (await api.call('GET', '/v2/apps?name=a-1')).body.items[0];
  for (const name of ['f-1', 'f-2', 'f-3']) fn = await api.createFn({ app_id: app.id, name, image: 'fnproject/hello:0.0.1' });
  for (const name of ['t-1', 't-2', 't-3']) await api.createTrigger({ app_id: app.id, fn_id: fn.id, name, type: 'http', source: `/${name}` });
});
afterEach(async () => {
  await api.close();
});

const listings = () => ({
  apps: '/v2/apps?per_page=1',
  fns: `/v2/fns?app_id=${app.id}&per_page=1`,
  triggers: `/v2/triggers?app_id=${app.id}&per_page=1`,
});

async function cursorOf(url: string): Promise<string> {
  const res = await api.call('GET', url);
  expect(res.status).toBe(200);
  return res.body.next_cursor;
}

describe('page cursors', () => {
  it.each(['apps', 'fns', 'triggers'] as const)('%s: a cursor handed out takes the listing on exactly where it stopped', async (kind) => {
    const url = listings()[kind];
    const names: string[] = [];
    let cursor = '';
    for (let i = 0; i < 10; i++) {
      const res = await api.call('GET', cursor ? `${url}&cursor=${cursor}` : url);
      expect(res.status).toBe(200);
      names.push(...res.body.items.map((x: any) => x.name));
      if (res.body.next_cursor) expect(res.body.next_cursor).toMatch(/^[A-Za-z0-9_-]+$/);
      cursor = res.body.next_cursor ?? '';
      if (!cursor) break;
    }
    expect(names).toEqual([`${kind[0]}-1`, `${kind[0]}-2`, `${kind[0]}-3`]);
  });

  it.each(['apps', 'fns', 'triggers'] as const)('%s: refuses a cursor it did not hand out', async (kind) => {
    const url = listings()[kind];
    const good = await cursorOf(url);
    const flipped = good.slice(0, 3) + (good[3] === 'A' ? 'B' : 'A') + good.slice(4);
    // What a bare base64url of the last name looks like (Fn's form, and fnts's before versioned cursors).
    const bare = Buffer.from(`${kind[0]}-1`).toString('base64url');
    for (const cursor of ['garbage', 'AAAA', bare, flipped, good.slice(0, -1), `${good}A`, '%00%FF']) {
      await api.expectError('GET', `${url}&cursor=${cursor}`, undefined, 400, 'Invalid cursor');
    }
  });

  it('refuses a cursor of one listing used on another', async () => {
    const { apps, fns, triggers } = listings();
    await api.expectError('GET', `${fns}&cursor=${await cursorOf(apps)}`, undefined, 400, 'Invalid cursor');
    await api.expectError('GET', `${triggers}&cursor=${await cursorOf(fns)}`, undefined, 400, 'Invalid cursor');
    await api.expectError('GET', `${apps}&cursor=${await cursorOf(triggers)}`, undefined, 400, 'Invalid cursor');
  });
});
