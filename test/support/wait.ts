/**
 * Tests wait on what they can observe (a container paused or gone, a call
 * running, a line logged), polled with a deadline, never on a fixed sleep
 * sized for the slowest machine.
 */
import diagnostics from 'node:diagnostics_channel';
import type { IncomingMessage } from 'node:http';

/**
 * Polls `check` every `every` ms until it returns true or `ms` pass; returns
 * whether it did. Assert on the result: `expect(await eventually(...)).toBe(true)`.
 */
export async function eventually(check: () => Promise<boolean> | boolean, ms: number, every = 100): Promise<boolean> {
  const until = Date.now() + ms;
  for (;;) {
    if (await check()) return true;
    if (Date.now() > until) return false;
    await new Promise((r) => setTimeout(r, every));
  }
}

/**
 * Resolves when an HTTP server in this process has read the headers of a
 * request that `matches` (Node's `http.server.request.start` diagnostics
 * channel, published before the server's handler runs); rejects after
 * `ms`. Start it before sending the request. Only for servers in the test
 * process (startTestServer, listenApi), not for a child `fnts`.
 */
export function requestArrives(matches: (req: IncomingMessage) => boolean, ms = 5000): Promise<IncomingMessage> {
  return new Promise<IncomingMessage>((resolve, reject) => {
    const onStart = (message: unknown): void => {
      const req = (message as { request: IncomingMessage }).request;
      if (!matches(req)) return;
      done();
      resolve(req);
    };
    const timer = setTimeout(() => {
      done();
      reject(new Error(`no matching request reached the server within ${ms} ms`));
    }, ms);
    const done = (): void => {
      clearTimeout(timer);
      diagnostics.unsubscribe('http.server.request.start', onStart);
    };
    diagnostics.subscribe('http.server.request.start', onStart);
  });
}
