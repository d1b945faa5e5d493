import { Readable } from 'node:stream';
import { describe, expect, it } from 'vitest';
import { wholeBody } from './http.js';

describe('wholeBody', () => {
  it('reads a call body whole: none, a buffer as it is, a stream to its end', async () => {
    expect(await wholeBody(null)).toEqual(Buffer.alloc(0));
    const buffer = Buffer.from('as it came');
    expect(await wholeBody(buffer)).toBe(buffer);
    expect((await wholeBody(Readable.from([Buffer.from('héllo, '), Buffer.from('wörld')]))).toString('utf8')).toBe('héllo, wörld');
  });

  it("rejects with the stream's own error (the caller left, the body was too big)", async () => {
    const cut = new Error('the client went away');
    const body = new Readable({ read() {} });
    body.push(Buffer.from('part'));
    setImmediate(() => body.destroy(cut));
    await expect(wholeBody(body)).rejects.toBe(cut);
  });
});
