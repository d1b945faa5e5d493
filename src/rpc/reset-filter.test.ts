import { EventEmitter } from 'node:events';
import type { ServerHttp2Stream } from 'node:http2';
import type { Socket } from 'node:net';
import { PassThrough } from 'node:stream';
import { describe, expect, it } from 'vitest';
import { ResetFilter } from './reset-filter.js';

const PREFACE = Buffer.from('PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n', 'latin1');

function frame(type: number, flags: number, id: number, payload: Buffer = Buffer.alloc(0)): Buffer {
  const head = Buffer.alloc(9);
  head.writeUIntBE(payload.length, 0, 3);
  head[3] = type;
  head[4] = flags;
  head.writeUInt32BE(id, 5);
  return Buffer.concat([head, payload]);
}
const rst = (id: number, code: number): Buffer => frame(0x3, 0, id, Buffer.from([0, 0, 0, code]));
const settings = frame(0x4, 0, 0, Buffer.from([0, 2, 0, 0, 0, 0]));
const data = (id: number): Buffer => frame(0x0, 0, id, Buffer.from('abc'));

/** A stream as the filter sees it: its id, and whether each side has ended. */
function stream(id: number, writableEnded: boolean, readableEnded: boolean): ServerHttp2Stream {
  return Object.assign(new EventEmitter(), { id, writableEnded, readableEnded }) as unknown as ServerHttp2Stream;
}

/** What the filter hands HTTP/2 when the client sends `bytes`, delivered in pieces of `piece` bytes. */
async function through(bytes: Buffer, piece: number, streams: ServerHttp2Stream[]): Promise<{ out: Buffer; counted: number }> {
  const socket = new PassThrough() as unknown as Socket;
  const filter = new ResetFilter(socket);
  let counted = 0;
  filter.onReset(() => counted++);
  for (const s of streams) filter.watch(s);
  const chunks: Buffer[] = [];
  filter.on('data', (c: Buffer) => chunks.push(c));
  filter.feed(Buffer.alloc(0));
  for (let at = 0; at < bytes.length; at += piece) (socket as unknown as PassThrough).write(bytes.subarray(at, at + piece));
  await new Promise((r) => setImmediate(r));
  return { out: Buffer.concat(chunks), counted };
}

describe('ResetFilter', () => {
  const input = Buffer.concat([PREFACE, settings, data(1), rst(1, 0), rst(3, 0), rst(5, 8), rst(7, 0), data(9)]);
  // 1: answered, client open -> its end. 3: still being served -> a reset. 5: CANCEL -> a reset. 7: the client had ended -> a reset.
  const streams = [stream(1, true, false), stream(3, false, false), stream(5, true, false), stream(7, true, true)];
  const expected = Buffer.concat([PREFACE, settings, data(1), frame(0x0, 0x1, 1), rst(3, 0), rst(5, 8), rst(7, 0), data(9)]);

  it.each([1, 2, 7, 13, 1000])("hands on every frame unchanged but the client's end of an answered stream, however the bytes are cut (pieces of %i)", async (piece) => {
    const { out, counted } = await through(input, piece, streams);
    expect(out.equals(expected)).toBe(true);
    expect(counted).toBe(3);
  });

  it('holds back no frame but a reset: a header claiming 16 MiB goes on at once, for nghttp2 to refuse, and what follows it too', async () => {
    const huge = Buffer.alloc(9);
    huge.writeUIntBE(0xffffff, 0, 3);
    huge.writeUInt32BE(1, 5);
    const bytes = Buffer.concat([PREFACE, settings, huge, Buffer.alloc(1000, 7)]);
    const { out } = await through(bytes, 100, []);
    expect(out.equals(bytes)).toBe(true);
  });

  it('passes a reset of the wrong length on unchanged, counted', async () => {
    const long = frame(0x3, 0, 1, Buffer.from([0, 0, 0, 0, 0]));
    const { out, counted } = await through(Buffer.concat([PREFACE, long, data(3)]), 3, [stream(1, true, false)]);
    expect(out.equals(Buffer.concat([PREFACE, long, data(3)]))).toBe(true);
    expect(counted).toBe(1);
  });
});
