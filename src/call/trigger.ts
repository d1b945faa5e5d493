/**
 * Fn's HTTP-trigger form of a call, as the http-stream FDK sees it and as the
 * runner protocol carries it between an LB and a runner (Fn's LB decorates
 * the request and maps the answer; its runners pass both through as they are).
 *
 * Request: Content-Type as it is, every other caller header X as Fn-Http-H-X,
 * plus Fn-Http-Method, Fn-Http-Request-Url and Fn-Intent: httprequest.
 * Answer: only Fn-Http-H-X (as X) and Content-Type reach the caller, and
 * Fn-Http-Status sets the status unless the call itself failed (>= 400).
 */
import type { Call, RawHeaders } from '../models/index.js';
import { canonical, sameName } from './http.js';

const H_PREFIX = 'fn-http-h-';

/** `out` with each of `headers` appended in the trigger form: Content-Type as it is, every other X as Fn-Http-H-X (X as `name` spells it). */
function decorate(out: RawHeaders, headers: RawHeaders, name: (raw: string) => string): RawHeaders {
  for (let i = 0; i + 1 < headers.length; i += 2) {
    const raw = headers[i]!;
    out.push(sameName(raw, 'content-type') ? 'Content-Type' : `Fn-Http-H-${name(raw)}`, headers[i + 1]!);
  }
  return out;
}

const asIs = (name: string): string => name;

/** The headers a trigger call's function gets, decorated from the caller's (names in Go's canonical form, as Fn sends them). */
export function triggerRequestHeaders(call: Call): RawHeaders {
  const out = decorate([], call.headers, canonical);
  out.push('Fn-Http-Method', call.method, 'Fn-Http-Request-Url', call.url, 'Fn-Intent', 'httprequest');
  return out;
}

/** The caller's answer from a function's answer to a trigger call. */
export function triggerAnswer(status: number, headers: RawHeaders): { status: number; headers: RawHeaders } {
  const { headers: out, fields } = stripTriggerForm(headers);
  const n = Number(fields['fn-http-status']);
  const userStatus = Number.isInteger(n) && n >= 100 && n <= 599 ? n : 0;
  return { status: status >= 400 ? status : userStatus || 200, headers: out };
}

/**
 * Headers in the trigger form split up: Fn-Http-H-X as X and Content-Type
 * kept (in order), the Fn-Http-* fields by lower-case name, the rest dropped.
 */
function stripTriggerForm(headers: RawHeaders): { headers: RawHeaders; fields: Record<string, string> } {
  const out: RawHeaders = [];
  const fields: Record<string, string> = {};
  for (let i = 0; i + 1 < headers.length; i += 2) {
    const name = headers[i]!;
    const lower = name.toLowerCase();
    if (lower.startsWith(H_PREFIX)) {
      if (lower.length > H_PREFIX.length) out.push(name.slice(H_PREFIX.length), headers[i + 1]!);
    } else if (lower === 'content-type') out.push('Content-Type', headers[i + 1]!);
    else if (lower.startsWith('fn-http-')) fields[lower] ??= headers[i + 1]!;
  }
  return { headers: out, fields };
}

/**
 * The reverse of triggerRequestHeaders: the caller's method, URL and headers
 * from a decorated request (a runner gets trigger calls decorated). Undefined
 * when `headers` are not in the trigger form (no Fn-Http-Method).
 */
export function undecorateTrigger(headers: RawHeaders): { method: string; url: string; headers: RawHeaders } | undefined {
  const { headers: out, fields } = stripTriggerForm(headers);
  const method = fields['fn-http-method'];
  return method === undefined ? undefined : { method, url: fields['fn-http-request-url'] ?? '', headers: out };
}

/**
 * The reverse of triggerAnswer: a caller's answer in the form a function
 * gives it to a trigger call (status 200 with Fn-Http-Status, each header X
 * as Fn-Http-H-X), so that an LB maps it back to the same answer.
 */
export function encodeTriggerAnswer(status: number, headers: RawHeaders): { status: number; headers: RawHeaders } {
  return { status: status >= 400 ? status : 200, headers: decorate(['Fn-Http-Status', String(status)], headers, asIs) };
}
