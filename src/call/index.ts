/**
 * call/ — the role-neutral call contracts every role shares: the Invoker the
 * invoke endpoints call (the local agent, or an LB placing calls on
 * runners), a running call, its body and answer, the header helpers, the
 * busy answers, the lookup of what a call is made from, call listeners, and
 * the HTTP trigger's framing between LB, runner and function.
 */
export { cancelError, serverBusy, shuttingDown } from './errors.js';
export type { CancelReason } from './errors.js';
export { canonical, HOP_HEADERS, headerLists, sameName, wholeBody, withoutHeaders, withoutHopHeaders } from './http.js';
export type { CallBody, CallResponse, RawHeaders } from './http.js';
export type { Invoker, RunningCall } from './invoker.js';
export type { CallListener } from './listener.js';
export type { Target, TargetLookup } from './lookup.js';
export { encodeTriggerAnswer, triggerAnswer, triggerRequestHeaders, undecorateTrigger } from './trigger.js';
