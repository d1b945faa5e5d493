import { describe, expect, it } from 'vitest';
import { isLoopbackHost } from './net.js';

describe('isLoopbackHost', () => {
  it('tells loopback addresses and localhost names from the others', () => {
    for (const host of ['127.0.0.1', '127.1.2.3', '::1', '[::1]', '0:0:0:0:0:0:0:1', '::ffff:127.0.0.1', 'localhost', 'LOCALHOST', 'fn.localhost']) expect(isLoopbackHost(host), host).toBe(true);
    // Every address of the machine is reachable from others; a name that only starts like a loopback address is a name.
    for (const host of ['0.0.0.0', '::', '10.0.0.5', '192.168.1.2', 'fd00::5', 'runner-1', 'localhost.example.com', '127.example.com', '']) expect(isLoopbackHost(host), host).toBe(false);
  });
});
