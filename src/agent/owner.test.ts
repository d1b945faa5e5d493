import { mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, utimesSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { claimSocketFolder, INSTANCE_FILE, socketFolder, sweepSocketFolders } from './owner.js';

describe('socket folders', () => {
  let root: string;
  beforeEach(() => {
    root = join(mkdtempSync(join(tmpdir(), 'fnts-owner-')), 'iofs');
  });
  afterEach(() => rmSync(join(root, '..'), { recursive: true, force: true }));

  /** An instance folder as claimSocketFolder leaves it, with container folders in it. */
  async function instanceWith(instance: string, containers: string[]): Promise<string> {
    const folder = await claimSocketFolder(root, instance);
    for (const c of containers) mkdirSync(join(folder, c));
    return folder;
  }

  it('gives each instance a short folder of its own that names it, and makes it once', async () => {
    const folder = await claimSocketFolder(root, 'host/100/5000');
    expect(folder).toBe(socketFolder(root, 'host/100/5000'));
    expect(folder).toMatch(/\/iofs\/[0-9a-f]{8}$/);
    expect(readFileSync(join(folder, INSTANCE_FILE), 'utf8')).toBe('host/100/5000');
    expect(socketFolder(root, 'host/100/5001')).not.toBe(folder);
    // start() again: the same folder, what is in it kept.
    mkdirSync(join(folder, 'c1'));
    expect(await claimSocketFolder(root, 'host/100/5000')).toBe(folder);
    expect(readdirSync(folder).sort()).toEqual(['c1', INSTANCE_FILE]);
    expect(readdirSync(root)).toEqual([folder.slice(root.length + 1)]);
  });

  it('removes every folder of a dead instance, containers starting or not, and none of a live one or of one it cannot judge', async () => {
    const dead = await instanceWith('host/1/1', ['01starting', '01running']);
    const live = await instanceWith('host/2/2', ['01live']);
    const elsewhere = await instanceWith('other-host/3/3', ['01far']);
    const self = await instanceWith('host/4/4', []);
    const alive = (instance: string): boolean | undefined => ({ 'host/1/1': false, 'host/2/2': true, 'host/4/4': false })[instance];
    const swept = await sweepSocketFolders(root, 'host/4/4', alive);
    expect(swept).toEqual({ removed: 1, failed: [], unowned: [] });
    expect(readdirSync(root).sort()).toEqual([live, elsewhere, self].map((f) => f.slice(root.length + 1)).sort());
    expect(readdirSync(live)).toContain('01live');
    expect(dead).not.toBe(live);
  });

  it('reports the folders of earlier versions (one per container, no instance) as unowned, and removes only stale half-made ones', async () => {
    mkdirSync(root, { recursive: true });
    mkdirSync(join(root, '01k0legacycontainer'));
    mkdirSync(join(root, '.claim-old'));
    mkdirSync(join(root, '.claim-new'));
    writeFileSync(join(root, '.claim-old', INSTANCE_FILE), 'host/9/9');
    const twoMinutesAgo = new Date(Date.now() - 120_000);
    utimesSync(join(root, '.claim-old'), twoMinutesAgo, twoMinutesAgo);
    const swept = await sweepSocketFolders(root, 'host/4/4', () => false);
    expect(swept).toEqual({ removed: 1, failed: [], unowned: [join(root, '01k0legacycontainer')] });
    expect(readdirSync(root).sort()).toEqual(['.claim-new', '01k0legacycontainer']);
  });

  it('refuses a folder that names another instance', async () => {
    const folder = socketFolder(root, 'host/5/5');
    mkdirSync(folder, { recursive: true });
    writeFileSync(join(folder, INSTANCE_FILE), 'host/6/6');
    await expect(claimSocketFolder(root, 'host/5/5')).rejects.toThrow(/belongs to host\/6\/6, not to this process/);
  });
});
