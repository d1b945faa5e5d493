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
import { bodyFraming, rfc3339, type CallRequest, type CallResponse, type Exchange, type ExchangeOptions } from './call.js';
import { triggerAnswer, triggerRequestHeaders } from './trigger.js';
import { httpExchange, requestHead, type ContainerConnection } from './http1.js';

/** One call over the FDK socket. */
export function httpStreamExchange(conn: ContainerConnection, req: CallRequest, opts: ExchangeOptions): Exchange {
  const headers = (req.call.triggerId !== undefined ? triggerRequestHeaders(req.call) : req.call.headers).concat('Fn-Call-Id', req.call.id, 'Fn-Deadline', rfc3339(opts.deadline));
  const x = httpExchange(conn, requestHead('POST', '/call', headers, bodyFraming(req)), req.body, opts.responseLimit);
  const response: Promise<CallResponse> = req.call.triggerId !== undefined
    ? x.response.then((a) => ({ ...triggerAnswer(a.status, a.headers), body: a.body }))
    : x.response;
  return { response, cancel: x.cancel };
}
