import { PassThrough } from 'node:stream';
import { describe, expect, it } from 'vitest';
import { ApiError } from '../../models/index.js';
import { responseLimit } from './call.js';
import { JsonChannel } from './stdio.js';

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
