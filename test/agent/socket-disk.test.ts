/**
 * A function cannot store data on the host through its socket folder: the
 * folder mounted at /tmp/iofs (where the FDK binds its socket) is a tmpfs
 * of its own, mounted by the server, 64 KiB large, so a function that
 * writes there gets ENOSPC at once instead of filling the host's disk (one
 * wrote 300 MB before). The mount goes with its container.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { mountsUnder, SOCKET_TMPFS_BYTES } from '../../src/agent/iofs.js';
import { ensureFunctionImage } from '../support/images.js';
import { startTestServer, type TestServer } from '../support/server.js';
import { eventually } from '../support/wait.js';

const FILLER_JS = `const fdk = require('@fnproject/fdk');
const fs = require('fs');
fdk.handle(async function (input) {
  let written = 0;
  let error = null;
  const chunk = Buffer.alloc(1 << 20, 1);
  try {
    const fd = fs.openSync('/tmp/iofs/blob', 'w');
    try {
      for (let i = 0; i < input.mb; i++) written += fs.writeSync(fd, chunk);
    } finally {
      fs.closeSync(fd);
    }
  } catch (e) {
    error = e.code;
  }
  return { written, error };
}, { inputMode: 'json' });
`;

describe('a function writing into its socket folder', () => {
  let s: TestServer;
  let image: string;
  beforeAll(async () => {
    image = await ensureFunctionImage('iofs-filler', FILLER_JS);
    s = await startTestServer();
  });
  afterAll(async () => {
    await s?.close();
  });

  it("gets ENOSPC past 64 KiB, the server's disk untouched, and the mount goes with the container", async () => {
    expect(s.server.agent!.socketDirs.mode).toBe('tmpfs');
    const app = await s.app();
    const fn = await s.fn(app, image, { memory: 128, idle_timeout: 1 });
    const res = await s.invoke(fn.id, { mb: 300 });
    expect(res.status, res.text).toBe(200);
    expect(res.json.error).toBe('ENOSPC');
    expect(res.json.written).toBeLessThanOrEqual(SOCKET_TMPFS_BYTES);
    const folder = s.server.agent!.socketFolder;
    expect(await mountsUnder(folder)).toHaveLength(1);
    // Retired at its idle timeout (1 s): its folder is unmounted and removed.
    expect(await eventually(async () => (await mountsUnder(folder)).length === 0, 10_000, 100)).toBe(true);
  }, 30_000);
});
