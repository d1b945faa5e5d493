/**
 * Fn's runner protocol (proto/fn-runner.proto, service `RunnerProtocol`), as
 * both sides speak it: the messages (the classes protobufjs generates from
 * the proto: src/rpc/gen/fn-runner.js) and the translations between fnts's
 * Call/CallOutcome and the wire.
 *
 * The wire form of a call is Fn's: TryCall.models_call_json is Fn's
 * models.Call JSON; for a call made through an HTTP trigger the headers are
 * already decorated (Fn-Http-H-X, Fn-Http-Method, Fn-Http-Request-Url) and
 * the answer travels as the function gives it (Fn-Http-Status, Fn-Http-H-X),
 * for the LB to map. So an fnts LB drives Fn's runners and Fn's LB drives
 * fnts's runners.
 */
import { triggerRequestHeaders } from '../call/index.js';
import { ApiError, callToJson, E, validateSecretName, type Call, type CallOutcome, type FnCallJson } from '../models/index.js';
import type { CallFinished, CallResultStart, ClientMsg, DataFrame, HttpHeader, RunnerMsg, RunnerStatus, TryCall } from './gen/fn-runner.js';

/*
 * The messages by the names the rest of fnts knows them. A message written
 * with these types has every field (a decoded one reads absent fields as
 * their zero values); `TryCallMsg.slot_hash_id` is the hex of the LB's slot
 * hash (Fn: which hot containers may serve the call; fnts runners compute
 * their own); CallFinished's durations are nanoseconds (Go's
 * time.Duration), its times Fn's date-time strings, its `details` the
 * call's id.
 */
export type TryCallMsg = TryCall;
export type DataFrameMsg = DataFrame;
export type HttpHeaderMsg = HttpHeader;
export type CallResultStartMsg = CallResultStart;
export type CallFinishedMsg = CallFinished;
export type { ClientMsg, RunnerMsg };
export type RunnerStatusMsg = RunnerStatus;

/**
 * fnts's extension of the protocol: an LB that keeps call records asks for
 * the call's log (TryCall.extensions[LOG_EXTENSION] = '1'), and an fnts
 * runner sends it in the stream's trailers (LOG_TRAILER, the raw bytes).
 * Fn's runners ignore the extension; their calls have no log at the LB.
 */
export const LOG_EXTENSION = 'fnts-log';

/**
 * fnts's extension for a call that has waited at the LB (every runner
 * refused it once): TryCall.extensions[MAKE_ROOM_EXTENSION] = '1' on the
 * runner the LB prefers asks it to evict idle containers of other fns, as a
 * full node does for a launch that waits, rather than only long-idle ones.
 */
export const MAKE_ROOM_EXTENSION = 'fnts-make-room';
export const LOG_TRAILER = 'fnts-log-bin';

/**
 * fnts's extension: a runner that drains refuses calls with this response
 * header set to '1', and an fnts LB places nothing more on that connection
 * (its Status says `draining` too). Fn's LB ignores it and places the
 * refused call elsewhere, as for any refusal.
 */
export const DRAINING_HEADER = 'fnts-draining';

/**
 * fnts's extension: the values of the fn's secrets (by name, UTF-8 text),
 * which an fnts LB puts in models_call_json under this field for a fn that
 * has secrets, and only on a connection with mutual TLS or to a runner on
 * loopback. An fnts runner takes them out before anything else reads the
 * call (takeSecrets) and gives them to that fn's containers of that
 * version (CallFn.secretsVersion) as files; they are never part of a Call,
 * a record or the queue. Fn's runners ignore the field.
 */
export const SECRETS_FIELD = 'fnts_secrets';

/**
 * Takes SECRETS_FIELD out of a parsed models_call_json (the object is
 * changed: the field is gone): the values by name, or undefined when it has
 * none. Throws 400 InvalidJson when the field is not an object of strings
 * (naming no value).
 */
export function takeSecrets(json: unknown): Map<string, string> | undefined {
  if (typeof json !== 'object' || json === null || Array.isArray(json) || !(SECRETS_FIELD in json)) return undefined;
  const j = json as Record<string, unknown>;
  const field = j[SECRETS_FIELD];
  delete j[SECRETS_FIELD];
  if (field === undefined || field === null) return undefined;
  if (typeof field !== 'object' || Array.isArray(field)) throw new ApiError(E.InvalidJSON, { message: `Invalid call: ${SECRETS_FIELD} must be an object` });
  const out = new Map<string, string>();
  for (const [name, value] of Object.entries(field)) {
    if (typeof value !== 'string') throw new ApiError(E.InvalidJSON, { message: `Invalid call: ${SECRETS_FIELD}.${name} must be a string` });
    validateSecretName(name);
    out.set(name, value);
  }
  return out;
}

/** A call's body goes in frames of at most this many bytes (well under gRPC's 4 MiB message limit). */
export const MAX_FRAME_BYTES = 64 * 1024;

const NS_PER_MS = 1_000_000;

/** Fn's models.Call JSON for `call`, in the wire form (a trigger call's headers decorated), with the fn's `secrets` when given. */
export function wireCallJson(call: Call, secrets?: Readonly<Record<string, string>>): FnCallJson & { [SECRETS_FIELD]?: Readonly<Record<string, string>> } {
  const json: FnCallJson & { [SECRETS_FIELD]?: Readonly<Record<string, string>> } = callToJson(call);
  if (secrets !== undefined) json[SECRETS_FIELD] = secrets;
  if (call.triggerId !== undefined) {
    const headers: Record<string, string[]> = {};
    const h = triggerRequestHeaders(call);
    for (let i = 0; i + 1 < h.length; i += 2) (headers[h[i]!] ??= []).push(h[i + 1]!);
    json.headers = headers;
  }
  // Fn's runners read these from config (buildConfig); fnts's runners read the fields.
  json.config = { ...json.config, FN_MEMORY: String(call.fn.memoryMB), FN_TYPE: 'sync', FN_FN_ID: call.fn.fnId, FN_APP_ID: call.fn.appId };
  return json;
}

/** CallFinished for a call that ended with `outcome`; `success`: the runner produced an answer (whatever its status). */
export function finishedMessage(outcome: CallOutcome, image: string, success: boolean): CallFinishedMsg {
  const t = outcome.timings;
  return {
    success,
    details: outcome.id,
    errorCode: success ? 0 : outcome.httpStatus,
    errorStr: success ? '' : (outcome.error ?? ''),
    createdAt: outcome.createdAt,
    startedAt: outcome.startedAt ?? '',
    completedAt: outcome.startedAt ? outcome.completedAt : '',
    schedulerDuration: Math.round(t.wait_ms * NS_PER_MS),
    executionDuration: Math.round(t.exec_ms * NS_PER_MS),
    errorUser: !success && outcome.errorUser,
    image,
    imagePullWaitDuration: Math.round((t.image_ms ?? 0) * NS_PER_MS),
    ctrPrepDuration: 0,
    ctrCreateDuration: Math.round((t.create_ms ?? 0) * NS_PER_MS),
    initStartTime: Math.round((t.start_ms ?? 0) * NS_PER_MS),
  };
}

/**
 * A CallFinished that refuses a call it never started: Fn's NACK, which an
 * LB may place elsewhere. `roomMs`: fnts's extension, how long until this
 * runner could make room for the call (see roomFromRefusal).
 */
export function refusalMessage(callId: string, status: number, message: string, roomMs?: number): CallFinishedMsg {
  return {
    success: false,
    details: callId,
    errorCode: status,
    errorStr: message,
    createdAt: new Date().toISOString(),
    startedAt: '',
    completedAt: '',
    schedulerDuration: roomMs === undefined ? 0 : Math.round(Math.max(1, roomMs) * NS_PER_MS),
    executionDuration: 0,
    errorUser: false,
    image: '',
    imagePullWaitDuration: 0,
    ctrPrepDuration: 0,
    ctrCreateDuration: 0,
    initStartTime: 0,
  };
}

/** A RunnerStatus with a runner's counts (Fn's other fields unset): calls in flight, received and handled, and whether it drains. */
export function runnerStatusMessage(s: { active: number; received: number; handled: number; draining: boolean }): RunnerStatusMsg {
  return {
    active: s.active,
    failed: false,
    id: '',
    details: s.draining ? 'draining' : '',
    errorCode: 0,
    errorStr: '',
    createdAt: '',
    startedAt: '',
    completedAt: '',
    cached: false,
    requestsReceived: s.received,
    requestsHandled: s.handled,
    kdumpsOnDisk: 0,
    schedulerDuration: 0,
    executionDuration: 0,
    isNetworkDisabled: false,
    customStatus: s.draining ? { draining: 'true' } : {},
    imagePullWaitDuration: 0,
    ctrPrepDuration: 0,
    ctrCreateDuration: 0,
    initStartTime: 0,
  };
}

/**
 * What a refusal says of room on its runner: an fnts runner puts in its
 * schedulerDuration (a call's wait for a container, which a refused call
 * did not have) how long until it could make room for the call by evicting
 * idle containers, at least 1 ms; Fn's runners send 0: unknown.
 */
export function roomFromRefusal(f: CallFinishedMsg): number | undefined {
  return f.schedulerDuration > 0 ? f.schedulerDuration / NS_PER_MS : undefined;
}

export function nsToMs(ns: number): number {
  return ns / NS_PER_MS;
}
