/**
 * The official Fn CLI (../shared/bin/fn, fnproject/cli 0.6.41) driving the
 * real `fnts` binary through a whole session, as a user would: apps,
 * functions with real images, config, updates, triggers called over HTTP,
 * invokes, deletes. fn-cli-flows.test.ts replays the same requests without
 * the CLI, for clones that have no ../shared.
 */
import { spawn } from 'node:child_process';
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { VERSION } from '../../src/server/index.js';
import { probeImage } from '../support/functions.js';
import { ensureFunctionImage, HELLO_FUNC_JS } from '../support/images.js';
import { peerPresent } from '../support/peers.js';
import { startFnts, type FntsProcess } from '../support/process.js';
import { TEST_ADMIN_TOKEN } from '../support/auth.js';

const FN_BIN = resolve(dirname(fileURLToPath(import.meta.url)), '..', '..', '..', 'shared', 'bin', 'fn');
const haveCli = peerPresent(existsSync(FN_BIN), 'the official fn CLI against fnts', `the Fn CLI 0.6.41 is not at ${FN_BIN} (a fresh clone has no ../shared)`);
const title = haveCli ? 'the official fn CLI against fnts' : 'the official fn CLI against fnts (skipped: ../shared/bin/fn, the Fn CLI 0.6.41, is absent from this clone)';

interface CliResult {
  code: number | null;
  stdout: string;
  stderr: string;
}

describe.skipIf(!haveCli)(title, () => {
  let fnts: FntsProcess;
  let dir: string;
  let helloImage: string;
  let probe: string;

  beforeAll(async () => {
    dir = mkdtempSync(join(tmpdir(), 'fnts-fncli-'));
    [helloImage, probe] = await Promise.all([ensureFunctionImage('hello', HELLO_FUNC_JS), probeImage()]);
    fnts = await startFnts({ FN_DB_URL: `sqlite3://${join(dir, 'fn.db')}` });
  });
  afterAll(async () => {
    // SIGTERM removes the containers this server started.
    if (fnts) expect(await fnts.stop()).toBe(0);
    if (dir) rmSync(dir, { recursive: true, force: true });
  });

  /** Runs the CLI; `input` is its stdin (none: /dev/null, as `fn invoke app fn < /dev/null`). */
  function fn(args: string[], input?: string, token: string | null = TEST_ADMIN_TOKEN): Promise<CliResult> {
    return new Promise<CliResult>((done, fail) => {
      const child = spawn(FN_BIN, args, {
        // The CLI authenticates with FN_TOKEN alone, as it does against any Fn server behind a token-checking proxy.
        env: { PATH: process.env['PATH'] ?? '', HOME: dir, FN_API_URL: fnts.url, FN_REGISTRY: 'local', ...(token === null ? {} : { FN_TOKEN: token }) },
        stdio: [input === undefined ? 'ignore' : 'pipe', 'pipe', 'pipe'],
      });
      let stdout = '';
      let stderr = '';
      child.stdout!.on('data', (b: Buffer) => (stdout += b.toString()));
      child.stderr!.on('data', (b: Buffer) => (stderr += b.toString()));
      const guard = setTimeout(() => child.kill('SIGKILL'), 20_000);
      child.on('error', (err) => {
        clearTimeout(guard);
        fail(err);
      });
      child.on('close', (code) => {
        clearTimeout(guard);
        done({ code, stdout, stderr });
      });
      if (input !== undefined) child.stdin!.end(input);
    });
  }

  /** Runs the CLI and expects it to succeed. */
  async function ok(args: string[], input?: string): Promise<string> {
    const res = await fn(args, input);
    expect(res, `fn ${args.join(' ')}`).toMatchObject({ code: 0 });
    return res.stdout;
  }

  /** Runs the CLI and expects it to fail with `message` on stderr (the CLI prints "Fn: <message>"). */
  async function fails(args: string[], message: string): Promise<void> {
    const res = await fn(args);
    expect(res.code, `fn ${args.join(' ')}: ${res.stdout}${res.stderr}`).toBe(1);
    expect(res.stderr).toContain(`Fn: ${message}`);
  }

  const json = async (args: string[]): Promise<any> => JSON.parse(await ok(args));

  it('is refused without FN_TOKEN or with a wrong one, in words that say what to send', async () => {
    for (const token of [null, 'fnts_0123456789abcdef_wrongwrongwrongwrongwrongwrongwrongwrongwro']) {
      const res = await fn(['list', 'apps'], undefined, token);
      expect(res.code, res.stdout + res.stderr).toBe(1);
      expect(res.stderr).toMatch(token === null ? /Authentication required: send 'Authorization: Bearer <token>'/ : /Invalid token/);
    }
  });

  it("fn version names the server's version", async () => {
    const out = await ok(['version']);
    expect(out).toContain('Client version: 0.6.41');
    expect(out).toMatch(new RegExp(`Server version:\\s+${VERSION.replaceAll('.', '\\.')}`));
  });

  it('creates, lists and inspects apps', async () => {
    expect(await ok(['create', 'app', 'cliapp'])).toContain('Successfully created app:  cliapp');
    await fails(['create', 'app', 'cliapp'], 'App already exists');
    await ok(['create', 'app', 'other']);

    const listed = await json(['list', 'apps', '--output', 'json']);
    expect(listed.map((a: any) => a.name)).toEqual(['cliapp', 'other']);
    expect(await ok(['list', 'apps'])).toMatch(/^NAME\s+ID\s*\ncliapp\s+\w{26}\s*\nother\s+\w{26}/);

    const app = await json(['inspect', 'app', 'cliapp']);
    // As Fn shows an app created without a shape or config: no such fields.
    expect(Object.keys(app).sort()).toEqual(['created_at', 'id', 'name', 'updated_at']);
    expect(app).toMatchObject({ name: 'cliapp', id: listed[0].id });
    await fails(['inspect', 'app', 'nope'], 'app nope not found');
  });

  it('creates, lists and inspects functions with a real image', async () => {
    expect(await ok(['create', 'function', 'cliapp', 'hello', helloImage])).toContain(`Successfully created function: hello with ${helloImage}`);
    await ok(['create', 'function', 'cliapp', 'probe', probe]);
    await fails(['create', 'function', 'cliapp', 'hello', helloImage], 'Fn with specified name already exists');

    const listed = await json(['list', 'functions', 'cliapp', '--output', 'json']);
    expect(listed.map((f: any) => [f.name, f.image])).toEqual([
      ['hello', helloImage],
      ['probe', probe],
    ]);
    const hello = await json(['inspect', 'function', 'cliapp', 'hello']);
    expect(hello).toMatchObject({ name: 'hello', image: helloImage, memory: 128, timeout: 30, idle_timeout: 30, id: listed[0].id });
    expect((await ok(['inspect', 'function', 'cliapp', 'hello', '--endpoint'])).trim()).toBe(`${fnts.url}/invoke/${hello.id}`);
  });

  it('sets, reads, lists and unsets app and function config', async () => {
    await ok(['config', 'app', 'cliapp', 'LEVEL', 'debug']);
    expect((await ok(['get', 'config', 'app', 'cliapp', 'LEVEL'])).trim()).toBe('debug');
    expect(await ok(['list', 'config', 'app', 'cliapp'])).toMatch(/KEY\s+VALUE\s*\nLEVEL\s+debug/);

    await ok(['config', 'function', 'cliapp', 'probe', 'GREETING', 'hi there']);
    expect((await ok(['get', 'config', 'function', 'cliapp', 'probe', 'GREETING'])).trim()).toBe('hi there');
    expect(await ok(['list', 'config', 'function', 'cliapp', 'probe'])).toMatch(/GREETING\s+hi there/);
    expect((await json(['inspect', 'function', 'cliapp', 'probe'])).config).toEqual({ GREETING: 'hi there' });

    await ok(['unset', 'config', 'function', 'cliapp', 'probe', 'GREETING']);
    await fails(['get', 'config', 'function', 'cliapp', 'probe', 'GREETING'], 'config key does not exist');
    await ok(['unset', 'config', 'app', 'cliapp', 'LEVEL']);
    await fails(['get', 'config', 'app', 'cliapp', 'LEVEL'], 'config key does not exist');
    expect((await json(['inspect', 'app', 'cliapp'])).config).toBeUndefined();
  });

  it("updates a function's memory and timeout, and an app's annotations", async () => {
    await ok(['update', 'function', 'cliapp', 'hello', '--memory', '256', '--timeout', '60']);
    expect(await json(['inspect', 'function', 'cliapp', 'hello'])).toMatchObject({ memory: 256, timeout: 60, image: helloImage });
    await ok(['update', 'app', 'cliapp', '--annotation', 'owner="me"']);
    expect((await json(['inspect', 'app', 'cliapp'])).annotations).toEqual({ owner: 'me' });
  });

  it('creates, lists and inspects an http trigger, and its URL answers GET and POST', async () => {
    const created = await ok(['create', 'trigger', 'cliapp', 'hello', 'hello-trigger', '--type', 'http', '--source', '/hello']);
    const endpoint = `${fnts.url}/t/cliapp/hello`;
    expect(created).toContain('Successfully created trigger: hello-trigger');
    expect(created).toContain(`Trigger Endpoint: ${endpoint}`);
    await fails(['create', 'trigger', 'cliapp', 'probe', 'clash', '--type', 'http', '--source', '/hello'], 'Trigger with the same type and source exists on this app');

    expect(await ok(['list', 'triggers', 'cliapp'])).toMatch(new RegExp(`hello\\s+hello-trigger\\s+\\w{26}\\s+http\\s+/hello\\s+${endpoint}`));
    expect(await ok(['list', 'triggers', 'cliapp', 'hello'])).toContain('hello-trigger');
    const t = await json(['inspect', 'trigger', 'cliapp', 'hello', 'hello-trigger']);
    expect(t).toMatchObject({ name: 'hello-trigger', type: 'http', source: '/hello', annotations: { 'fnproject.io/trigger/httpEndpoint': endpoint } });
    expect((await ok(['inspect', 'trigger', 'cliapp', 'hello', 'hello-trigger', '--endpoint'])).trim()).toBe(endpoint);

    const get = await fetch(endpoint);
    expect([get.status, await get.json()]).toEqual([200, { message: 'Hello World' }]);
    const post = await fetch(endpoint, { method: 'POST', body: '{"name":"post"}', headers: { 'content-type': 'application/json' } });
    expect([post.status, await post.json()]).toEqual([200, { message: 'Hello post' }]);
    expect(post.headers.get('fn-call-id')).toMatch(/^\w{26}$/);
  });

  it('invokes with and without a body, with a content type, and shows the call id', async () => {
    expect(JSON.parse(await ok(['invoke', 'cliapp', 'hello'], '{"name":"x"}\n'))).toEqual({ message: 'Hello x' });
    expect(JSON.parse(await ok(['invoke', 'cliapp', 'hello']))).toEqual({ message: 'Hello World' });

    const asJson = JSON.parse(await ok(['invoke', 'cliapp', 'probe', '--content-type', 'application/json'], '{"a":1}'));
    expect(asJson.headers['Content-Type']).toEqual(['application/json']);
    expect(asJson.body).toEqual({ a: 1 });
    const asText = JSON.parse(await ok(['invoke', 'cliapp', 'probe', '--content-type', 'text/plain'], 'plain words'));
    expect(asText.headers['Content-Type']).toEqual(['text/plain']);
    expect(asText.body).toBe('plain words');

    expect(await ok(['invoke', 'cliapp', 'hello', '--display-call-id'], '{"name":"id"}')).toMatch(/^Call ID: \w{26}\n\{"message":"Hello id"\}/);
  });

  it('deletes a trigger, a function and an app, and they are gone', async () => {
    const endpoint = `${fnts.url}/t/cliapp/hello`;
    await ok(['delete', 'trigger', 'cliapp', 'hello', 'hello-trigger']);
    await fails(['inspect', 'trigger', 'cliapp', 'hello', 'hello-trigger'], 'trigger hello-trigger not found');
    await fails(['list', 'triggers', 'cliapp'], 'no triggers found for app: cliapp');
    expect((await fetch(endpoint)).status).toBe(404);

    expect(await ok(['delete', 'function', 'cliapp', 'hello'])).toContain('Function hello deleted');
    await fails(['inspect', 'function', 'cliapp', 'hello'], 'function hello not found');
    expect((await json(['list', 'functions', 'cliapp', '--output', 'json'])).map((f: any) => f.name)).toEqual(['probe']);

    expect(await ok(['delete', 'app', 'cliapp'])).toContain('App cliapp deleted');
    await ok(['delete', 'app', 'other']);
    await fails(['inspect', 'app', 'cliapp'], 'app cliapp not found');
    const apps = await fn(['list', 'apps']);
    expect(apps.code).toBe(0);
    expect(apps.stderr).toContain('No apps found');
  });
});
