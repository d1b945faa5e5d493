import { randomBytes } from 'node:crypto';
import { chmodSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { loadSecretKey, SECRET_KEY_FILE, SecretKeyError } from './secret-key.js';

const root = mkdtempSync(join(tmpdir(), 'fnts-key-'));
afterAll(() => rmSync(root, { recursive: true, force: true }));
let n = 0;
const fresh = (): string => join(root, `d${n++}`);

describe('the secrets key', () => {
  it('is FNTS_SECRET_KEY when given, and then no file is made', async () => {
    const dir = fresh();
    const key = randomBytes(32);
    expect(await loadSecretKey(key, dir)).toEqual({ key, from: 'env' });
    expect(() => statSync(dir)).toThrow();
  });

  it('is a key of the process alone without a data directory', async () => {
    const a = await loadSecretKey(undefined, undefined);
    const b = await loadSecretKey(undefined, undefined);
    expect(a.from).toBe('process');
    expect(a.key).toHaveLength(32);
    expect(a.key.equals(b.key)).toBe(false);
  });

  it('is made at first start as a file of 32 bytes only its owner can use, and read back at every other', async () => {
    const dir = fresh();
    const first = await loadSecretKey(undefined, dir);
    expect(first.from).toBe('made');
    const path = join(dir, SECRET_KEY_FILE);
    expect(first.path).toBe(path);
    expect(statSync(path).mode & 0o777).toBe(0o600);
    expect(readFileSync(path)).toEqual(first.key);
    const again = await loadSecretKey(undefined, dir);
    expect(again).toEqual({ key: first.key, from: 'file', path });
    // Nothing else is left in the folder.
    expect(readdirSync(dir)).toEqual([SECRET_KEY_FILE]);
  });

  it('is one key for servers starting at the same moment on one data directory', async () => {
    const dir = fresh();
    const keys = await Promise.all(Array.from({ length: 8 }, () => loadSecretKey(undefined, dir)));
    expect(keys.filter((k) => k.from === 'made')).toHaveLength(1);
    for (const k of keys) expect(k.key).toEqual(keys[0]!.key);
    expect(readdirSync(dir)).toEqual([SECRET_KEY_FILE]);
  });

  it('refuses a key file other users can read, saying how to fix it', async () => {
    const dir = fresh();
    await loadSecretKey(undefined, dir);
    const path = join(dir, SECRET_KEY_FILE);
    chmodSync(path, 0o644);
    await expect(loadSecretKey(undefined, dir)).rejects.toThrow(
      new SecretKeyError(`the secrets key file ${path} can be used by other users (mode 0644); make it the server user's only: chmod 600 ${path}`),
    );
    chmodSync(path, 0o640);
    await expect(loadSecretKey(undefined, dir)).rejects.toThrow(/mode 0640/);
  });

  it('refuses a key file of the wrong size rather than making a new key', async () => {
    const dir = fresh();
    mkdirSync(dir);
    const path = join(dir, SECRET_KEY_FILE);
    writeFileSync(path, randomBytes(31), { mode: 0o600 });
    await expect(loadSecretKey(undefined, dir)).rejects.toThrow(`the secrets key file ${path} holds 31 bytes, not the 32 of a key: restore it from the backup of the data directory`);
    writeFileSync(path, '', { mode: 0o600 });
    await expect(loadSecretKey(undefined, dir)).rejects.toThrow('holds 0 bytes');
  });

  it('refuses a folder where the key file should be', async () => {
    const dir = fresh();
    mkdirSync(join(dir, SECRET_KEY_FILE), { recursive: true });
    await expect(loadSecretKey(undefined, dir)).rejects.toThrow(`the secrets key file ${join(dir, SECRET_KEY_FILE)} is not a file`);
  });
});
