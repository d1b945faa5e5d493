import { mkdtempSync, readdirSync, readFileSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pino, type Logger } from 'pino';
import { afterAll, describe, expect, it } from 'vitest';
import { ApiError, E } from '../models/index.js';
import { plainSecretFolders, secretFolders, secretsMount, SECRETS_PATH, type AgentSecrets } from './secrets.js';
import type { FunctionSpec } from './spec.js';

const root = mkdtempSync(join(tmpdir(), 'fnts-secret-folders-'));
afterAll(() => rmSync(root, { recursive: true, force: true }));
let n = 0;

const spec = { appId: 'A1', fnId: 'F1' } as FunctionSpec;
const mode = (path: string): number => statSync(path).mode & 0o777;

function logged(): { log: Logger; lines: Array<Record<string, unknown>> } {
  const lines: Array<Record<string, unknown>> = [];
  return { log: pino({ level: 'debug' }, { write: (l: string) => void lines.push(JSON.parse(l) as Record<string, unknown>) }), lines };
}

const source = (files: Record<string, string> | Error): AgentSecrets['source'] => ({
  secretsFor: async () => {
    if (files instanceof Error) throw files;
    return new Map(Object.entries(files).map(([k, v]) => [k, Buffer.from(v)]));
  },
});

describe('secret folders (plain, where no tmpfs can be mounted)', () => {
  it('hold one read-only file per secret in a folder closed to other users, bound read-only at /run/secrets, and go on close', async () => {
    const dir = join(root, `c${n++}.secrets`);
    const { log } = logged();
    const mount = await secretsMount({ source: source({ DB_PASSWORD: 'hunter2', 'with space': '' }), folders: plainSecretFolders }, spec, dir, log);
    expect(mount).toEqual({ hostPath: join(dir, 'files'), containerPath: SECRETS_PATH, readOnly: true });
    expect(mode(dir)).toBe(0o700);
    expect(mode(join(dir, 'files'))).toBe(0o555);
    expect(readdirSync(join(dir, 'files')).sort()).toEqual(['DB_PASSWORD', 'with space']);
    expect(mode(join(dir, 'files', 'DB_PASSWORD'))).toBe(0o444);
    expect(readFileSync(join(dir, 'files', 'DB_PASSWORD'), 'utf8')).toBe('hunter2');
    await plainSecretFolders.close(dir);
    expect(() => statSync(dir)).toThrow();
  });

  it('are not made for a fn without secrets', async () => {
    const dir = join(root, `c${n++}.secrets`);
    const { log } = logged();
    expect(await secretsMount({ source: source({}), folders: plainSecretFolders }, spec, dir, log)).toBeUndefined();
    expect(await secretsMount(undefined, spec, dir, log)).toBeUndefined();
    expect(() => statSync(dir)).toThrow();
  });

  it('leave nothing behind when the secrets cannot be read, and say why without any value', async () => {
    const dir = join(root, `c${n++}.secrets`);
    const { log, lines } = logged();
    const err = await secretsMount({ source: source(new Error('the secret "K" of fn F1 cannot be decrypted')), folders: plainSecretFolders }, spec, dir, log).catch((e: unknown) => e);
    expect(ApiError.is(err, E.SecretsUnavailable)).toBe(true);
    expect((err as ApiError).status).toBe(500);
    expect(() => statSync(dir)).toThrow();
    expect(lines).toEqual([expect.objectContaining({ level: 40, app: 'A1', fn: 'F1', reason: 'the secret "K" of fn F1 cannot be decrypted' })]);
  });

  it('are said once, at warn, to be on the disk where no tmpfs can be mounted', () => {
    const { log, lines } = logged();
    expect(secretFolders('folder', '/tmp/fnts/x', log).mode).toBe('folder');
    expect(lines).toEqual([expect.objectContaining({ level: 40, iofs: '/tmp/fnts/x', msg: expect.stringContaining("written to plain folders on this host's disk") })]);
    const quiet = logged();
    expect(secretFolders('tmpfs', '/tmp/fnts/x', quiet.log).mode).toBe('tmpfs');
    expect(quiet.lines).toEqual([]);
  });
});
