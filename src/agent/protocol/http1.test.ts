import { PassThrough } from 'node:stream';
import { describe, expect, it } from 'vitest';
import { ContainerConnection, ProtocolError, requestHead, ResponseParser, type ResponseHead } from './http1.js';

interface Collected {
  head?: ResponseHead;
  body: string;
  ended: boolean;
  error?: Error;
}

function collect(parser: ResponseParser): Collected {
  const c: Collected = { body: '', ended: false };
  parser.expect({
    head: (h) => (c.head = h),
    data: (chunk) => {
      c.body += chunk.toString('latin1');
      return true;
    },
    end: () => (c.ended = true),
    error: (e) => (c.error = e),
  });
  return c;
}

/** Feeds `wire` to a fresh parser cut into pieces of `size` bytes. */
function parse(wire: string, size: number): Collected {
  const p = new ResponseParser();
  const c = collect(p);
  const bytes = Buffer.from(wire, 'latin1');
  for (let i = 0; i < bytes.length; i += size) p.push(bytes.subarray(i, i + size));
  return c;
}

const CHUNKED =
  'HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nFn-Fdk-Version: fdk-node/0.0.76\r\nTransfer-Encoding: chunked\r\n\r\n' + '7\r\n{"a":1}\r\n3;ext=1\r\n,"b\r\n0\r\nX-Trailer: t\r\n\r\n';

describe('ResponseParser', () => {
  it.each([1, 2, 3, 7, 64, 10_000])('parses a chunked answer however the bytes are split (%i at a time)', (size) => {
    const c = parse(CHUNKED, size);
    expect(c.head).toEqual({
      status: 200,
      headers: ['Content-Type', 'application/json', 'Fn-Fdk-Version', 'fdk-node/0.0.76', 'Transfer-Encoding', 'chunked'],
    });
    expect(c.body).toBe('{"a":1},"b');
    expect(c.ended).toBe(true);
    expect(c.error).toBeUndefined();
  });

  it.each([1, 5, 1000])('parses a Content-Length answer (%i bytes at a time), keeping repeated headers', (size) => {
    const c = parse('HTTP/1.1 201 Created\r\nX-A: 1\r\nx-a:  2 \r\nContent-Length: 5\r\n\r\nhello', size);
    expect(c.head).toEqual({ status: 201, headers: ['X-A', '1', 'x-a', '2', 'Content-Length', '5'] });
    expect(c.body).toBe('hello');
    expect(c.ended).toBe(true);
  });

  it('skips interim 1xx answers and ends bodiless answers at once', () => {
    const c = parse('HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 204 No Content\r\n\r\n', 4);
    expect(c.head?.status).toBe(204);
    expect(c.ended).toBe(true);
  });

  it('ends a close-delimited body when the connection closes', () => {
    const p = new ResponseParser();
    const c = collect(p);
    p.push(Buffer.from('HTTP/1.0 200 OK\r\n\r\nstream of bytes'));
    expect(c.ended).toBe(false);
    expect(p.closeAfter).toBe(true);
    p.closed();
    expect(c.body).toBe('stream of bytes');
    expect(c.ended).toBe(true);
  });

  it('fails an answer cut short by a closed connection', () => {
    const p = new ResponseParser();
    const c = collect(p);
    p.push(Buffer.from('HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nabc'));
    p.closed();
    expect(c.error).toBeInstanceOf(ProtocolError);
    expect(c.ended).toBe(false);
  });

  it.each([
    ['a bad status line', 'HTTP/2 200 OK\r\n\r\n'],
    ['a status out of range', 'HTTP/1.1 999 Nope\r\n\r\n'],
    ['a header without a colon', 'HTTP/1.1 200 OK\r\nbroken\r\n\r\n'],
    ['a bad content length', 'HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n'],
    ['a bad chunk size', 'HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n'],
    ['data nobody asked for', 'HTTP/1.1 200 OK\r\nContent-Length: 1\r\n\r\nab'],
  ])('refuses %s', (_what, wire) => {
    expect(() => parse(wire, 1000)).toThrow(ProtocolError);
  });

  it('refuses a header block over 64 KB', () => {
    const p = new ResponseParser();
    collect(p);
    expect(() => p.push(Buffer.from(`HTTP/1.1 200 OK\r\nX: ${'a'.repeat(70_000)}`))).toThrow('function response header too large');
  });
});

describe('requestHead', () => {
  it('frames the body itself and drops hop headers and header injection', () => {
    const head = requestHead('POST', '/call', ['Content-Type', 'text/plain', 'Host', 'evil', 'Content-Length', '99', 'X-Bad', 'a\r\nInjected: 1', 'Connection', 'close', 'Fn-Call-Id', 'id'], 5);
    expect(head).toBe('POST /call HTTP/1.1\r\nHost: localhost\r\nContent-Type: text/plain\r\nFn-Call-Id: id\r\nContent-Length: 5\r\n\r\n');
    expect(requestHead('POST', '/call', [], 'chunked')).toBe('POST /call HTTP/1.1\r\nHost: localhost\r\nTransfer-Encoding: chunked\r\n\r\n');
  });
});

describe('ContainerConnection', () => {
  it('sends a streamed body chunked and reads the answer, over any duplex', async () => {
    const toContainer = new PassThrough();
    const fromContainer = new PassThrough();
    const wire: Buffer[] = [];
    toContainer.on('data', (b: Buffer) => wire.push(b));
    const duplex = Object.assign(new PassThrough(), {});
    // A duplex whose writes go to `toContainer` and whose reads come from `fromContainer`.
    duplex._write = (chunk, enc, cb) => toContainer.write(chunk, enc, cb);
    fromContainer.on('data', (b: Buffer) => duplex.push(b));
    const conn = new ContainerConnection(() => duplex);
    const body = new PassThrough();
    const got: Collected = { body: '', ended: false };
    conn.send(requestHead('POST', '/call', [], 'chunked'), body, {
      head: (h) => (got.head = h),
      data: (c) => ((got.body += c.toString()), true),
      end: () => (got.ended = true),
      error: (e) => (got.error = e),
    });
    body.write('ab');
    body.end('cde');
    await new Promise((r) => setImmediate(r));
    expect(Buffer.concat(wire).toString()).toBe('POST /call HTTP/1.1\r\nHost: localhost\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nab\r\n3\r\ncde\r\n0\r\n\r\n');
    fromContainer.write('HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok');
    await new Promise((r) => setImmediate(r));
    expect(got).toMatchObject({ body: 'ok', ended: true });
    expect(got.head?.status).toBe(200);
  });

  it('keeps chunked framing whole when the container reads slowly', async () => {
    // A writable with a tiny buffer that drains late: every write reports backpressure.
    const wire: Buffer[] = [];
    const { Duplex } = await import('node:stream');
    const duplex = new Duplex({
      highWaterMark: 4,
      read: () => undefined,
      write: (chunk: Buffer, _enc, cb) => {
        wire.push(Buffer.from(chunk));
        setTimeout(cb, 1);
      },
    });
    const conn = new ContainerConnection(() => duplex);
    const body = new PassThrough();
    conn.send(requestHead('POST', '/call', [], 'chunked'), body, { head: () => undefined, data: () => true, end: () => undefined, error: () => undefined });
    const parts = ['x'.repeat(100), 'y'.repeat(300), 'z'.repeat(7)];
    for (const p of parts) body.write(p);
    body.end();
    await new Promise<void>((r) => body.once('end', () => setTimeout(r, 50)));
    const sent = Buffer.concat(wire).toString('latin1');
    const framed = sent.slice(sent.indexOf('\r\n\r\n') + 4);
    expect(framed).toBe(parts.map((p) => `${p.length.toString(16)}\r\n${p}\r\n`).join('') + '0\r\n\r\n');
  });

  it("reads the next answer on a connection the last answer's reader left paused", async () => {
    const { Duplex } = await import('node:stream');
    const written: string[] = [];
    const duplex = new Duplex({ read: () => undefined, write: (chunk: Buffer, _enc, cb) => (written.push(chunk.toString()), cb()) });
    const conn = new ContainerConnection(() => duplex);
    const sink = (got: Collected, flowing: boolean) => ({
      head: (h: ResponseHead) => (got.head = h),
      data: (c: Buffer) => ((got.body += c.toString()), flowing),
      end: () => (got.ended = true),
      error: (e: Error) => (got.error = e),
    });
    // The first answer's last chunk fills its reader, which says stop: the connection pauses, then the answer ends.
    const first: Collected = { body: '', ended: false };
    conn.send(requestHead('POST', '/call', [], 0), null, sink(first, false));
    duplex.push('HTTP/1.1 200 OK\r\nContent-Length: 4\r\n\r\nlast');
    await new Promise((r) => setImmediate(r));
    expect(first).toMatchObject({ body: 'last', ended: true });
    expect(duplex.isPaused()).toBe(true);
    // The next call on the kept-alive connection gets its answer all the same.
    const second: Collected = { body: '', ended: false };
    conn.send(requestHead('POST', '/call', [], 0), null, sink(second, true));
    duplex.push('HTTP/1.1 200 OK\r\nContent-Length: 4\r\n\r\nnext');
    await new Promise((r) => setImmediate(r));
    expect(second).toMatchObject({ body: 'next', ended: true });
    expect(written).toHaveLength(2);
  });
});
