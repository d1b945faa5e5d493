import { PassThrough } from 'node:stream';
import { describe, expect, it } from 'vitest';
import { ApiError, FunctionError } from '../../models/index.js';
import { responseLimit } from './call.js';
import { JsonChannel, JsonObjectSplitter } from './stdio.js';

/** A json-format function that answers each request line with one object whose body is `size` bytes. */
function channelAnswering(size: number): JsonChannel {
  const stdin = new PassThrough();
  const stdout = new PassThrough();
  stdin.on('data', () => {
    const body = 'x'.repeat(size);
    const text = JSON.stringify({ body, content_type: 'text/plain' });
    // In pieces, as a pipe delivers it.
    for (let i = 0; i < text.length; i += 1 << 20) stdout.write(text.slice(i, i + (1 << 20)));
  });
  return new JsonChannel(stdin, stdout);
}

describe('JsonChannel response limit', () => {
  it('takes an answer past 64 MiB when FN_MAX_RESPONSE_SIZE is 0 (no limit), as every other format does', async () => {
    const answer = (await channelAnswering(65 * 1024 * 1024).request({ call_id: 'c' }, responseLimit(0))) as { body: string };
    expect(answer.body.length).toBe(65 * 1024 * 1024);
  });

  it('refuses an answer past FN_MAX_RESPONSE_SIZE with 502', async () => {
    const err = await channelAnswering(5000)
      .request({ call_id: 'c' }, responseLimit(1000))
      .catch((e: unknown) => e);
    expect(err).toBeInstanceOf(ApiError);
    expect(err).toMatchObject({ status: 502, code: 'FunctionResponseTooBig' });
  });
});

describe('JsonObjectSplitter', () => {
  const objects = [
    { body: '"} a } ] { [ \\"] \\\\', nested: [{ x: '}' }, []] },
    { body: 'é€😀', protocol: { headers: {} } },
  ];
  const text = Buffer.from(` ${JSON.stringify(objects[0])}\n\t${JSON.stringify(objects[1])}\n`);

  it('finds each object however the stream is cut, strings holding braces, quotes and escapes included', () => {
    for (const cuts of [...Array.from({ length: text.length - 1 }, (_, i) => [i + 1]), Array.from({ length: text.length - 1 }, (_, i) => i + 1)]) {
      const splitter = new JsonObjectSplitter();
      const found: string[] = [];
      let from = 0;
      for (const to of [...cuts, text.length]) {
        found.push(...splitter.push(text.subarray(from, to)));
        from = to;
        // Only an object begun and not ended is pending.
        if (found.length === 0 && to > 1) expect(splitter.pending).toBe(to - 1);
      }
      // Cuts inside the second object's multi-byte characters included: each character comes whole.
      expect(found).toEqual(objects.map((o) => JSON.stringify(o)));
      expect(splitter.pending).toBe(0);
    }
  });

  it('fails on anything but whitespace between objects, and stays failed', () => {
    const splitter = new JsonObjectSplitter();
    expect(() => splitter.push(Buffer.from('{"a":1} x'))).toThrow(FunctionError);
    expect(() => splitter.push(Buffer.from('{"b":2}'))).toThrow(FunctionError);
  });
});
