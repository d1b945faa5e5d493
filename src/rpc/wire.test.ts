import type * as grpc from '@grpc/grpc-js';
import { describe, expect, it } from 'vitest';
import { grpcJsService } from '../../test/support/grpc-js.js';
import { refusalMessage, roomFromRefusal, runnerStatusMessage, type RunnerMsg } from './runner-protocol.js';
import { decodeClientMsg, decodeRunnerMsg, decodeRunnerStatus, encodeClientMsg, encodeRunnerMsg, encodeRunnerStatus, grpcMessage, grpcTimeout, MessageReader } from './wire.js';

/** grpc-js's serializers for the same proto, from protobufjs's reflection of it (not the generated code). */
function grpcJsMethods(): { engage: grpc.MethodDefinition<object, object>; status: grpc.MethodDefinition<object, object> } {
  const service = grpcJsService('fn-runner', 'RunnerProtocol');
  return { engage: service['Engage'] as grpc.MethodDefinition<object, object>, status: service['Status'] as grpc.MethodDefinition<object, object> };
}

/** A RunnerMsg as a runner sends it (unframed bytes, as decodeRunnerMsg takes them). */
function runnerBytes(msg: RunnerMsg): Buffer {
  return encodeRunnerMsg(msg).subarray(5);
}

describe('the runner protocol on the wire', () => {
  it('encodes a TryCall and a data frame as grpc-js decodes them, and decodes what grpc-js encodes', () => {
    const { engage } = grpcJsMethods();
    const reader = new MessageReader(1024);
    const bytes = Buffer.concat([
      encodeClientMsg({ try: { models_call_json: '{"id":"x"}', slot_hash_id: '', extensions: { 'fnts-log': '1' } } }),
      encodeClientMsg({ data: { data: Buffer.from('hello'), eof: true } }),
    ]);
    // Split mid-prefix and mid-message: the reader joins them.
    const messages = [...reader.push(bytes.subarray(0, 3)), ...reader.push(bytes.subarray(3, 20)), ...reader.push(bytes.subarray(20))];
    expect(reader.partial).toBe(0);
    const decoded = messages.map((m) => engage.requestDeserialize(m) as Record<string, unknown>);
    expect(decoded[0]).toMatchObject({ body: 'try', try: { models_call_json: '{"id":"x"}', extensions: { 'fnts-log': '1' } } });
    expect(decoded[1]).toMatchObject({ body: 'data', data: { eof: true } });
    expect(Buffer.from((decoded[1] as { data: { data: Buffer } }).data.data).toString()).toBe('hello');

    const sent: RunnerMsg = {
      finished: {
        success: true,
        details: 'id',
        errorCode: 0,
        errorStr: '',
        createdAt: 'c',
        startedAt: 's',
        completedAt: 'e',
        schedulerDuration: 12_000_000_000,
        executionDuration: 5,
        errorUser: false,
        image: 'img',
        imagePullWaitDuration: 0,
        ctrPrepDuration: 0,
        ctrCreateDuration: 0,
        initStartTime: 0,
      },
    };
    const back = decodeRunnerMsg(engage.responseSerialize(sent));
    // `body` (which oneof field is set) is a getter of the generated class.
    expect({ ...back, body: back.body }).toEqual(engage.responseDeserialize(engage.responseSerialize(sent)));
    expect(back.finished?.schedulerDuration).toBe(12_000_000_000);
    expect(back.body).toBe('finished');
  });

  it('decodes into the generated types: 64-bit integers as numbers, absent fields as their zero values, bytes as Buffers', () => {
    const { engage, status } = grpcJsMethods();
    // proto3 sends no zero values: a CallFinished with only a few fields set, as Fn's runner sends a refusal.
    const sparse = decodeRunnerMsg(engage.responseSerialize({ finished: { errorCode: 503, executionDuration: 2 ** 40 } }));
    expect(sparse.finished).toMatchObject({ success: false, errorStr: '', startedAt: '', errorCode: 503 });
    expect(sparse.finished!.executionDuration).toBe(2 ** 40);
    expect(sparse.finished!.schedulerDuration).toBe(0);
    for (const field of ['schedulerDuration', 'executionDuration', 'imagePullWaitDuration', 'ctrPrepDuration', 'ctrCreateDuration', 'initStartTime'] as const) {
      expect(typeof sparse.finished![field]).toBe('number');
    }
    const frame = decodeClientMsg(engage.requestSerialize({ data: { data: Buffer.from('body'), eof: true } }));
    expect(Buffer.isBuffer(frame.data!.data)).toBe(true);
    expect(decodeClientMsg(engage.requestSerialize({ data: { eof: true } })).data!.data).toHaveLength(0);

    const counts = runnerStatusMessage({ active: 2, received: 2 ** 33, handled: 5, draining: false });
    const statusBytes = encodeRunnerStatus(counts).subarray(5);
    expect(status.responseDeserialize(statusBytes)).toMatchObject({ active: 2, requestsReceived: 2 ** 33, requestsHandled: 5 });
    const read = decodeRunnerStatus(status.responseSerialize({ requestsReceived: 2 ** 33 }));
    expect([read.requestsReceived, read.requestsHandled, read.kdumpsOnDisk, read.active]).toEqual([2 ** 33, 0, 0, 0]);
  });

  it("carries a refusal's room estimate in schedulerDuration, at least 1 ms, and reads Fn's 0 as unknown", () => {
    const over = (m: RunnerMsg) => decodeRunnerMsg(runnerBytes(m)).finished!;
    expect(roomFromRefusal(over({ finished: refusalMessage('id', 503, 'busy', 250) }))).toBe(250);
    expect(roomFromRefusal(over({ finished: refusalMessage('id', 503, 'busy', 0) }))).toBe(1);
    expect(roomFromRefusal(over({ finished: refusalMessage('id', 503, 'busy') }))).toBeUndefined();
  });

  it('refuses a message above the limit and a compressed one', () => {
    const big = Buffer.alloc(5);
    big.writeUInt32BE(2048, 1);
    expect(() => new MessageReader(1024).push(big)).toThrow(/2048 bytes/);
    const compressed = Buffer.from([1, 0, 0, 0, 0]);
    expect(() => new MessageReader(1024).push(compressed)).toThrow(/compressed/);
  });

  it('writes grpc-timeout within its 8 digits and reads a percent-encoded grpc-message', () => {
    expect(grpcTimeout(40_000)).toBe('40000m');
    expect(grpcTimeout(0.2)).toBe('1m');
    expect(grpcTimeout(200_000_000)).toBe('200000S');
    expect(grpcMessage('no%20room%20%E2%9C%93')).toBe('no room ✓');
    expect(grpcMessage('100% bad')).toBe('100% bad');
    expect(grpcMessage(undefined)).toBe('');
  });
});
