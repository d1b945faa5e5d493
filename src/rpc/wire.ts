/**
 * gRPC's wire format for the runner protocol, as both ends of it speak it
 * over node:http2 directly (the LB: runner-client.ts, channel.ts; the
 * runner: server.ts): the messages encoded and decoded by the code
 * protobufjs generates from proto/ (src/rpc/gen/, made by
 * scripts/proto-gen.mjs), and gRPC's framing (a 5-byte prefix per message),
 * status codes, timeout and trailers, as
 * https://github.com/grpc/grpc/blob/master/doc/PROTOCOL-HTTP2.md specifies
 * them.
 *
 * A decoded message is the generated class's instance: a field the peer left
 * out (proto3 sends no zero values) reads as its zero value from the
 * prototype, 64-bit integers are numbers, bytes are Buffers typed as
 * Uint8Array (asBuffer views them as Buffers without a copy).
 *
 * grpc-js costs about three times the CPU of plain HTTP/2 for one Engage
 * round trip on the LB (its channel, call and filter stacks per stream:
 * bench:fleet LB CPU per call 784 -> 513 us), and its server writes each
 * message of a stream in its own syscall (runner CPU per call 440 -> 334
 * us once an answer went in one write). Fn's own LB and runners, which use
 * grpc-go, interoperate with both ends (test/fleet/interop.test.ts).
 */
import { ClientMsg, RunnerMsg, RunnerStatus } from './gen/fn-runner.js';

/** Paths of the service's methods (the proto has no package). */
export const ENGAGE_PATH = '/RunnerProtocol/Engage';
export const STATUS_PATH = '/RunnerProtocol/Status';
export const STATUS2_PATH = '/RunnerProtocol/Status2';
export const CONFIGURE_PATH = '/RunnerProtocol/ConfigureRunner';

/** The most bytes one message may have, either way (a DataFrame is at most 64 KiB from fnts's and Fn's peers). */
export const MAX_MESSAGE_BYTES = 8 * 1024 * 1024;

/**
 * An HTTP/2 setting (an id no standard uses: peers ignore it, RFC 9113
 * 6.5.2) that fnts's LB sends as 1 in its first SETTINGS frame, saying "I
 * half-close every stream with its request, so I reset none of the streams
 * you end": a runner lets its connections skip the reset filter
 * (reset-filter.ts).
 */
export const FNTS_CLIENT_SETTING = 0xf7a5;

/** gRPC's status codes. */
export const GrpcStatus = {
  OK: 0,
  CANCELLED: 1,
  UNKNOWN: 2,
  INVALID_ARGUMENT: 3,
  DEADLINE_EXCEEDED: 4,
  NOT_FOUND: 5,
  ALREADY_EXISTS: 6,
  PERMISSION_DENIED: 7,
  RESOURCE_EXHAUSTED: 8,
  FAILED_PRECONDITION: 9,
  ABORTED: 10,
  OUT_OF_RANGE: 11,
  UNIMPLEMENTED: 12,
  INTERNAL: 13,
  UNAVAILABLE: 14,
  DATA_LOSS: 15,
  UNAUTHENTICATED: 16,
} as const;

const STATUS_NAMES = new Map<number, string>(Object.entries(GrpcStatus).map(([name, code]) => [code, name]));

/**
 * A gRPC call that ended with a status other than OK: the server's, or the
 * client's own (DEADLINE_EXCEEDED when no answer came in time, UNAVAILABLE
 * when the connection failed). The message reads as grpc-js's does
 * ("3 INVALID_ARGUMENT: details"); decisions read `code`.
 */
export class GrpcError extends Error {
  constructor(
    readonly code: number,
    readonly details: string,
    options?: ErrorOptions,
  ) {
    super(`${code} ${STATUS_NAMES.get(code) ?? 'UNKNOWN'}: ${details}`, options);
    this.name = 'GrpcError';
  }
}

/**
 * The gRPC status of an answer whose HTTP status is not 200 (a proxy's, or
 * a server that is not gRPC), as gRPC's spec maps them
 * (doc/http-grpc-status-mapping.md).
 */
export function statusOfHttp(status: number): number {
  switch (status) {
    case 400:
      return GrpcStatus.INTERNAL;
    case 401:
      return GrpcStatus.UNAUTHENTICATED;
    case 403:
      return GrpcStatus.PERMISSION_DENIED;
    case 404:
      return GrpcStatus.UNIMPLEMENTED;
    case 429:
    case 502:
    case 503:
    case 504:
      return GrpcStatus.UNAVAILABLE;
    default:
      return GrpcStatus.UNKNOWN;
  }
}

/** The generated code's encode and decode of one message type. */
export interface MessageCodec<T> {
  encode(message: T): { finish(): Uint8Array };
  decode(bytes: Uint8Array): T;
}

/** One message in gRPC's framing: uncompressed flag, 4-byte big-endian length, the bytes. */
function framed(bytes: Uint8Array): Buffer {
  const out = Buffer.allocUnsafe(5 + bytes.length);
  out[0] = 0;
  out.writeUInt32BE(bytes.length, 1);
  out.set(bytes, 5);
  return out;
}

/** `message` as one framed gRPC message. */
export function encodeMessage<T>(codec: MessageCodec<T>, message: T): Buffer {
  return framed(codec.encode(message).finish());
}

export function encodeClientMsg(msg: ClientMsg): Buffer {
  return encodeMessage(ClientMsg, msg);
}

/** google.protobuf.Empty, framed (its encoding is no bytes). */
export function encodeEmpty(): Buffer {
  return framed(new Uint8Array(0));
}

/** Throws on bytes that are not a ClientMsg. */
export function decodeClientMsg(bytes: Buffer): ClientMsg {
  return ClientMsg.decode(bytes);
}

export function encodeRunnerMsg(msg: RunnerMsg): Buffer {
  return encodeMessage(RunnerMsg, msg);
}

export function encodeRunnerStatus(status: RunnerStatus): Buffer {
  return encodeMessage(RunnerStatus, status);
}

/** Throws on bytes that are not a RunnerMsg. */
export function decodeRunnerMsg(bytes: Buffer): RunnerMsg {
  return RunnerMsg.decode(bytes);
}

/** Throws on bytes that are not a RunnerStatus. */
export function decodeRunnerStatus(bytes: Buffer): RunnerStatus {
  return RunnerStatus.decode(bytes);
}

/** A decoded bytes field as a Buffer, without a copy (in Node protobufjs decodes bytes as Buffers already). */
export function asBuffer(bytes: Uint8Array): Buffer {
  return Buffer.isBuffer(bytes) ? bytes : Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength);
}

/**
 * Splits a stream of DATA chunks into gRPC messages. Throws on a compressed
 * message (none was asked for) or one above `maxBytes`.
 */
export class MessageReader {
  /** What arrived and is not a whole message yet; joined only when a message is complete in it. */
  private chunks: Buffer[] = [];
  private size = 0;

  constructor(private readonly maxBytes: number) {}

  /** The messages `chunk` completes, in order. */
  push(chunk: Buffer): Buffer[] {
    this.chunks.push(chunk);
    this.size += chunk.length;
    const out: Buffer[] = [];
    while (this.size >= 5) {
      const head = this.chunks[0]!.length >= 5 ? this.chunks[0]! : this.joined();
      if (head[0] !== 0) throw new Error('a compressed gRPC message, which was not asked for');
      const length = head.readUInt32BE(1);
      if (length > this.maxBytes) throw new Error(`a gRPC message of ${length} bytes, above the ${this.maxBytes} allowed`);
      if (this.size < 5 + length) break;
      const buf = this.chunks.length === 1 ? this.chunks[0]! : this.joined();
      out.push(buf.subarray(5, 5 + length));
      const rest = buf.subarray(5 + length);
      this.chunks = rest.length > 0 ? [rest] : [];
      this.size = rest.length;
    }
    return out;
  }

  /** Bytes of a message begun and not finished. */
  get partial(): number {
    return this.size;
  }

  private joined(): Buffer {
    const whole = Buffer.concat(this.chunks, this.size);
    this.chunks = [whole];
    return whole;
  }
}

/** grpc-timeout for `ms` milliseconds (at most 8 digits, as the spec allows). */
export function grpcTimeout(ms: number): string {
  const whole = Math.max(1, Math.ceil(ms));
  return whole < 1e8 ? `${whole}m` : `${Math.ceil(whole / 1000)}S`;
}

/** grpc-timeout in milliseconds (undefined: none, or not in the spec's form). */
export function parseGrpcTimeout(raw: string | string[] | undefined): number | undefined {
  const text = Array.isArray(raw) ? raw[0] : raw;
  const m = text === undefined ? null : /^(\d{1,8})([HMSmun])$/.exec(text);
  if (!m) return undefined;
  const unitMs = { H: 3_600_000, M: 60_000, S: 1000, m: 1, u: 0.001, n: 0.000001 }[m[2] as 'H'];
  return Number(m[1]) * unitMs;
}

/** grpc-message is percent-encoded (the spec's form: bytes outside printable ASCII, and '%'). */
export function encodeGrpcMessage(text: string): string {
  return encodeURIComponent(text);
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
