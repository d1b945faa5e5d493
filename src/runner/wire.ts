/**
 * gRPC's wire format for the runner protocol, for the LB's side, which
 * speaks it over node:http2 directly (lb/client.ts, lb/channel.ts): the
 * messages encoded and decoded with protobufjs from the same proto file,
 * into the same shapes @grpc/proto-loader gives the rest of the code, and
 * gRPC's framing (a 5-byte prefix per message), status codes, timeout and
 * trailers, as https://github.com/grpc/grpc/blob/master/doc/PROTOCOL-HTTP2.md
 * specifies them.
 *
 * grpc-js costs about three times the CPU of plain HTTP/2 for one Engage
 * round trip (its channel, call and filter stacks per stream); on an LB,
 * where the round trip is most of the work, that was most of the cost
 * (bench:fleet: LB CPU per call 784 -> 513 us). The runner keeps grpc-js's
 * server: it must take whatever Fn's LBs send, and there the saving was
 * small (about 6%).
 */
import protobuf from 'protobufjs';
import { RUNNER_PROTO_PATH, type ClientMsg, type RunnerMsg, type RunnerStatusMsg } from './protocol.js';

/** Paths of the service's methods (the proto has no package). */
export const ENGAGE_PATH = '/RunnerProtocol/Engage';
export const STATUS_PATH = '/RunnerProtocol/Status';

/** gRPC status codes used here. */
export const GrpcStatus = { OK: 0, CANCELLED: 1, UNKNOWN: 2, DEADLINE_EXCEEDED: 4, RESOURCE_EXHAUSTED: 8, INTERNAL: 13, UNAVAILABLE: 14 } as const;

/** The shapes proto-loader gives (keepCase, longs as numbers, enums as strings, defaults, oneof names). */
const TO_OBJECT: protobuf.IConversionOptions = { longs: Number, enums: String, defaults: true, oneofs: true };

interface Codec {
  clientMsg: protobuf.Type;
  runnerMsg: protobuf.Type;
  runnerStatus: protobuf.Type;
  empty: protobuf.Type;
}

let codec: Codec | undefined;

function types(): Codec {
  if (!codec) {
    const root = new protobuf.Root();
    root.loadSync(RUNNER_PROTO_PATH, { keepCase: true });
    codec = {
      clientMsg: root.lookupType('ClientMsg'),
      runnerMsg: root.lookupType('RunnerMsg'),
      runnerStatus: root.lookupType('RunnerStatus'),
      empty: root.lookupType('google.protobuf.Empty'),
    };
  }
  return codec;
}

/** One message in gRPC's framing: uncompressed flag, 4-byte big-endian length, the bytes. */
function framed(bytes: Uint8Array): Buffer {
  const out = Buffer.allocUnsafe(5 + bytes.length);
  out[0] = 0;
  out.writeUInt32BE(bytes.length, 1);
  out.set(bytes, 5);
  return out;
}

export function encodeClientMsg(msg: ClientMsg): Buffer {
  const { body: _oneof, ...fields } = msg;
  return framed(types().clientMsg.encode(fields).finish());
}

export function encodeEmpty(): Buffer {
  return framed(new Uint8Array(0));
}

export function decodeRunnerMsg(bytes: Buffer): RunnerMsg {
  const t = types().runnerMsg;
  return t.toObject(t.decode(bytes), TO_OBJECT) as RunnerMsg;
}

export function decodeRunnerStatus(bytes: Buffer): RunnerStatusMsg {
  const t = types().runnerStatus;
  return t.toObject(t.decode(bytes), TO_OBJECT) as RunnerStatusMsg;
}

/** Loads the proto now (startup), so the first call does not pay for it. */
export function loadWire(): void {
  types();
}

/**
 * Splits a stream of DATA chunks into gRPC messages. Throws on a compressed
 * message (none was asked for) or one above `maxBytes`.
 */
export class MessageReader {
  private pending: Buffer[] = [];
  private pendingBytes = 0;

  constructor(private readonly maxBytes: number) {}

  /** The messages `chunk` completes, in order. */
  push(chunk: Buffer): Buffer[] {
    let buf = chunk;
    if (this.pendingBytes > 0) {
      this.pending.push(chunk);
      buf = Buffer.concat(this.pending, this.pendingBytes + chunk.length);
      this.pending = [];
      this.pendingBytes = 0;
    }
    const out: Buffer[] = [];
    let at = 0;
    while (buf.length - at >= 5) {
      if (buf[at] !== 0) throw new Error('a compressed gRPC message, which was not asked for');
      const length = buf.readUInt32BE(at + 1);
      if (length > this.maxBytes) throw new Error(`a gRPC message of ${length} bytes, above the ${this.maxBytes} allowed`);
      if (buf.length - at - 5 < length) break;
      out.push(buf.subarray(at + 5, at + 5 + length));
      at += 5 + length;
    }
    if (at < buf.length) {
      const rest = buf.subarray(at);
      this.pending.push(rest);
      this.pendingBytes = rest.length;
    }
    return out;
  }

  /** Bytes of a message begun and not finished. */
  get partial(): number {
    return this.pendingBytes;
  }
}

/** grpc-timeout for `ms` milliseconds (at most 8 digits, as the spec allows). */
export function grpcTimeout(ms: number): string {
  const whole = Math.max(1, Math.ceil(ms));
  return whole < 1e8 ? `${whole}m` : `${Math.ceil(whole / 1000)}S`;
}

/** grpc-message is percent-encoded. */
export function grpcMessage(raw: string | string[] | undefined): string {
  const text = Array.isArray(raw) ? raw[0] : raw;
  if (!text) return '';
  try {
    return decodeURIComponent(text);
  } catch {
    return text;
  }
}
