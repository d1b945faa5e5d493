/**
 * grpc-js, another gRPC implementation than fnts's own (src/rpc/), as a peer
 * in tests: its client against fnts's servers, its server against fnts's
 * channels. Its messages are encoded and decoded by protobufjs's reflection
 * of proto/ (loaded from the .proto at run time, as @grpc/proto-loader
 * does), not by the generated code fnts uses, so a test also checks the
 * generated code against the proto.
 */
import { fileURLToPath } from 'node:url';
import * as grpc from '@grpc/grpc-js';
import protobuf from 'protobufjs';

/** The shapes proto-loader gives (fields keep their case; 64-bit integers as numbers; defaults and oneof names filled in). */
const TO_OBJECT: protobuf.IConversionOptions = { longs: Number, enums: String, defaults: true, oneofs: true };

/** A proto file of fnts's (proto/NAME.proto), read as protobufjs's reflection. */
export function protoRoot(name: 'fn-runner' | 'fn-poolmanager'): protobuf.Root {
  const root = new protobuf.Root();
  root.loadSync(fileURLToPath(new URL(`../../proto/${name}.proto`, import.meta.url)), { keepCase: true });
  return root;
}

/** A message type's serializer and deserializer of plain objects. */
export function messageSerializers(type: protobuf.Type): { serialize: (value: object) => Buffer; deserialize: (bytes: Buffer) => Record<string, unknown> } {
  return {
    serialize: (value) => Buffer.from(type.encode(type.fromObject(value)).finish()),
    deserialize: (bytes) => type.toObject(type.decode(bytes), TO_OBJECT),
  };
}

/** `service` of proto/`name`.proto as grpc-js serves and calls it. */
export function grpcJsService(name: 'fn-runner' | 'fn-poolmanager', service: string): grpc.ServiceDefinition {
  const svc = protoRoot(name).lookupService(service);
  const definition: Record<string, grpc.MethodDefinition<object, object>> = {};
  for (const m of svc.methodsArray) {
    m.resolve();
    const request = messageSerializers(m.resolvedRequestType!);
    const response = messageSerializers(m.resolvedResponseType!);
    definition[m.name] = {
      path: `/${service}/${m.name}`,
      requestStream: m.requestStream === true,
      responseStream: m.responseStream === true,
      requestSerialize: request.serialize,
      requestDeserialize: request.deserialize,
      responseSerialize: response.serialize,
      responseDeserialize: response.deserialize,
    };
  }
  return definition;
}

/** A grpc-js client of `service` at 127.0.0.1:`port`, its methods by name. */
export function grpcJsClient(
  name: 'fn-runner' | 'fn-poolmanager',
  service: string,
  port: number,
  credentials = grpc.credentials.createInsecure(),
): grpc.Client & Record<string, (...args: unknown[]) => unknown> {
  const Client = grpc.makeGenericClientConstructor(grpcJsService(name, service), service);
  return new Client(`127.0.0.1:${port}`, credentials) as never;
}
