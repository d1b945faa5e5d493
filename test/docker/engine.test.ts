import { describe, expect, it } from 'vitest';
import { docker, ensureNodeBaseImage } from '../support/images.js';

describe('the Docker engine the suite runs on', () => {
  it('runs a real container from the locally built Node base image and removes it', async () => {
    const image = await ensureNodeBaseImage();
    const d = docker();
    const container = await d.createContainer({
      Image: image,
      Cmd: ['-e', 'process.stdout.write(JSON.stringify({ v: process.version, uid: process.getuid() }))'],
      User: '1000:1000',
      Labels: { 'fnts.test': 'engine' },
      HostConfig: { Memory: 64 * 1024 * 1024, NetworkMode: 'none' },
    });
    try {
      await container.start();
      const { StatusCode } = await container.wait();
      const logs = await container.logs({ stdout: true, stderr: false });
      // Docker multiplexes the log stream: an 8-byte header precedes each frame.
      const out = logs.subarray(8).toString('utf8');
      expect(StatusCode).toBe(0);
      expect(JSON.parse(out)).toEqual({ v: process.version, uid: 1000 });
    } finally {
      await container.remove({ force: true });
    }
    const left = await d.listContainers({ all: true, filters: { label: ['fnts.test=engine'] } });
    expect(left).toEqual([]);
  });
});
