/**
 * The answers every Invoker gives a call it cannot run, whichever role it
 * is: no room before the call's slot deadline, and a server that stops.
 */
import { ApiError, E } from '../models/index.js';

/** Callers are asked to come back after this many seconds (Fn's Retry-After). */
const RETRY_AFTER_SECONDS = '15';

/** 503 Timed out - server too busy, with Retry-After. */
export function serverBusy(): ApiError {
  return new ApiError(E.CallTimeoutServerBusy, { headers: { 'Retry-After': RETRY_AFTER_SECONDS } });
}

/** 503 Service is shutting down. */
export function shuttingDown(): ApiError {
  return new ApiError(E.ServiceUnavailable);
}

/**
 * Why a call is cancelled: its caller left ('client-left': a function
 * already working on the call may finish it and keep its container), or its
 * server stops ('shutdown': the call is cut at once, its container goes).
 */
export type CancelReason = 'client-left' | 'shutdown';

/** The error a call cancelled for `reason` ends with (its response rejects with it). */
export function cancelError(reason: CancelReason): ApiError {
  return reason === 'shutdown' ? shuttingDown() : new ApiError(E.ClientCancelled);
}
