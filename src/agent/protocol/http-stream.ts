/**
 * The http-stream FDK protocol, client side: one HTTP/1.1 `POST /call` per
 * call over the container's unix socket, on one kept-alive connection.
 *
 * Request: for /invoke, the caller's headers as they are; for an HTTP
 * trigger, Content-Type as it is and every other header X as Fn-Http-H-X,
 * plus Fn-Http-Method, Fn-Http-Request-Url and Fn-Intent. Always Fn-Call-Id
 * and Fn-Deadline (RFC 3339).
 *
 * Answer: for /invoke, the function's status and headers as they are; for a
 * trigger, only Fn-Http-H-X (as X) and Content-Type pass, and Fn-Http-Status
 * sets the status unless the function itself failed (>= 400).
 */
import { bodyFraming, canonical, rfc3339, sameName, type CallRequest, type CallResponse, type Exchange, type ExchangeOptions, type RawHeaders } from './call.js';
import { httpExchange, requestHead, type ContainerConnection } from './http1.js';

function triggerRequestHeaders(req: CallRequest): RawHeaders {
  const out: RawHeaders = [];
  const h = req.call.headers;
  for (let i = 0; i + 1 < h.length; i += 2) {
    const name = h[i]!;
    out.push(sameName(name, 'content-type') ? 'Content-Type' : `Fn-Http-H-${canonical(name)}`, h[i + 1]!);
  }
  out.push('Fn-Http-Method', req.call.method, 'Fn-Http-Request-Url', req.call.url, 'Fn-Intent', 'httprequest');
  return out;
}

function triggerAnswer(status: number, headers: RawHeaders): { status: number; headers: RawHeaders } {
  let userStatus = 0;
  const out: RawHeaders = [];
  for (let i = 0; i + 1 < headers.length; i += 2) {
    const name = headers[i]!;
    const lower = name.toLowerCase();
    if (lower.startsWith('fn-http-h-')) {
      if (lower.length > 'fn-http-h-'.length) out.push(name.slice('fn-http-h-'.length), headers[i + 1]!);
    } else if (lower === 'content-type') out.push('Content-Type', headers[i + 1]!);
    else if (lower === 'fn-http-status') {
      const n = Number(headers[i + 1]);
      if (Number.isInteger(n) && n >= 100 && n <= 599) userStatus = n;
    }
  }
  return { status: status >= 400 ? status : userStatus || 200, headers: out };
}

/** One call over the FDK socket. */
export function httpStreamExchange(conn: ContainerConnection, req: CallRequest, opts: ExchangeOptions): Exchange {
  const headers = (req.call.triggerId !== undefined ? triggerRequestHeaders(req) : req.call.headers).concat('Fn-Call-Id', req.call.id, 'Fn-Deadline', rfc3339(opts.deadline));
  const x = httpExchange(conn, requestHead('POST', '/call', headers, bodyFraming(req)), req.body, opts.responseLimit);
  const response: Promise<CallResponse> = req.call.triggerId !== undefined
    ? x.response.then((a) => ({ ...triggerAnswer(a.status, a.headers), body: a.body }))
    : x.response;
  return { response, cancel: x.cancel };
}
