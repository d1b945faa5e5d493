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
 *
 * Fn's container contract for the FDK's own status: 200 is an answer; 502
 * means the function failed (502 "function failed", the container carries
 * on); 504 means it ran out of time (504 "Timed out", the container carries
 * on); anything else is an FDK fault (502 "invalid function response", the
 * container is retired). The function's own status travels in Fn-Http-Status.
 */
import { bodyFraming, rfc3339, type CallRequest, type CallResponse, type Exchange, type ExchangeOptions } from './call.js';
import { triggerAnswer, triggerRequestHeaders } from '../../call/index.js';
import { httpExchange, requestHead, type ContainerConnection } from './http1.js';
import { E, FunctionError } from '../../models/index.js';

/** A failure the FDK itself reported in a complete answer: the container is fine and takes more calls. */
export class FdkReportedError extends FunctionError {}

/** The error for an FDK answer other than 200, once its body is read (so the connection stays usable). */
async function fdkFailure(status: number, body: CallResponse['body']): Promise<FunctionError> {
  if (!Buffer.isBuffer(body)) for await (const _ of body) void _;
  if (status === 502) return new FdkReportedError(E.FunctionFailed);
  if (status === 504) return new FdkReportedError(E.CallTimeout);
  return new FunctionError(E.FunctionInvalidResponse, { message: `${E.FunctionInvalidResponse.message}: the FDK answered status ${status}` });
}

/** One call over the FDK socket. */
export function httpStreamExchange(conn: ContainerConnection, req: CallRequest, opts: ExchangeOptions): Exchange {
  const headers = (req.call.triggerId !== undefined ? triggerRequestHeaders(req.call) : req.call.headers).concat('Fn-Call-Id', req.call.id, 'Fn-Deadline', rfc3339(opts.deadline));
  const x = httpExchange(conn, requestHead('POST', '/call', headers, bodyFraming(req)), req.body, opts.responseLimit);
  const trigger = req.call.triggerId !== undefined;
  const response: Promise<CallResponse> = x.response.then(async (a) => {
    if (a.status !== 200) throw await fdkFailure(a.status, a.body);
    return trigger ? { ...triggerAnswer(a.status, a.headers), body: a.body } : a;
  });
  return { response, cancel: x.cancel };
}
