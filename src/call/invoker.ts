/**
 * The one interface the invoke path depends on. The local agent implements
 * it (full and pure-runner nodes); the LB's agent implements it by placing
 * the call on a runner. The server never knows which it holds.
 */
import type { Call, CallOutcome } from '../models/index.js';
import type { CancelReason } from './errors.js';
import type { CallBody, CallResponse } from './http.js';

/** A call started with Invoker.invoke(). */
export interface RunningCall {
  /**
   * The function's answer. A streamed body holds the call's container until
   * it is consumed or destroyed. Rejects with the error the caller should
   * get (an ApiError with Fn's status and message).
   */
  readonly response: Promise<CallResponse>;
  /**
   * How the call ended: status, error (and whether the function caused it),
   * timings, stats, log. Resolves once the call is over (its answer sent or
   * abandoned); never rejects. Reading it makes the invoker keep the call's
   * log and sample its container: ask only when it will be used.
   */
  readonly outcome: Promise<CallOutcome>;
  /**
   * What the container wrote to stdout and stderr during the call (stderr
   * only for the formats whose answer is stdout), capped at
   * FN_MAX_LOG_SIZE_BYTES. Resolves once the container has moved on (its
   * next call, its end, or a moment after this call: output travels through
   * the engine and may trail the answer); '' when no container ran the call.
   * Never rejects. Like `outcome`, ask only when it will be used.
   */
  readonly log: Promise<string>;
  /**
   * Cancels the call (default 'client-left'): its response rejects with
   * cancelError(reason). A caller that leaves cancels softly (a function
   * already working on the call may finish it and keep its container); a
   * stopping server ('shutdown') cuts it at once.
   */
  cancel(reason?: CancelReason): void;
}

export interface Invoker {
  /**
   * Starts `call` with its request body `body` (`bodyLength`: a streamed
   * body's declared length). Never throws: a call refused at once has a
   * rejected response.
   */
  invoke(call: Call, body: CallBody, bodyLength?: number): RunningCall;
  /** Sync calls in flight here now: detached calls yield to them (agent/async.ts). */
  syncInFlight?(): number;
  /** Makes room now for a call of `call`'s fn, when it keeps containers (the agent); see Agent.makeRoom. */
  makeRoom?(call: Call): void;
  /**
   * How long (ms) until room could be made for a call of `call`'s fn here
   * by evicting idle containers (0: now); undefined when that would not be
   * enough, or when the invoker keeps no containers.
   */
  roomIn?(call: Call): number | undefined;
  /**
   * Cuts every call in progress now (they answer 503 Service is shutting
   * down), so that close() completes without waiting for functions.
   */
  abort(): void;
  /** Refuses new calls, lets running ones finish, releases everything. Idempotent. */
  close(): Promise<void>;
}
