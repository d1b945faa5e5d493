/**
 * Test functions, written with the official Node FDK as Fn users write them.
 *
 * `probe` does what its JSON input asks, so one image covers every behaviour
 * the tests need:
 *   {"sleep": ms}            answer after a while
 *   {"exit": code}           die in the middle of the call
 *   {"bytes": n}             answer with n bytes
 *   {"status": 201, "headers": {"X-A": "1"}, "contentType": "text/plain"}
 *                            answer through the HTTP gateway (triggers)
 *   {"write": "/path"}       try to write a file, report whether it worked
 * and always reports what it saw: container hostname, uid, the FN_* and
 * config environment, the request headers, the gateway's method/URL/headers,
 * the call id and the body. The config variable MODE changes how it starts:
 *   MODE=never-ready         never binds the FDK socket
 *   MODE=exit-on-start       exits at once
 */
import { ensureFunctionImage } from './images.js';

export const PROBE_FUNC_JS = `const fdk = require('@fnproject/fdk');
const fs = require('fs');
const os = require('os');

if (process.env.MODE === 'never-ready') {
  setInterval(() => {}, 1000);
} else if (process.env.MODE === 'exit-on-start') {
  process.exit(3);
} else {
  fdk.handle(async function (input, ctx) {
    const cmd = input && typeof input === 'object' ? input : {};
    if (cmd.sleep) await new Promise((r) => setTimeout(r, cmd.sleep));
    if (cmd.exit !== undefined) process.exit(cmd.exit);
    if (cmd.bytes) return fdk.rawResult(Buffer.alloc(cmd.bytes, 'x'));
    const gw = ctx.httpGateway;
    if (cmd.status) gw.statusCode = cmd.status;
    for (const [k, v] of Object.entries(cmd.headers || {})) gw.setResponseHeader(k, v);
    if (cmd.contentType) ctx.responseContentType = cmd.contentType;
    let wrote;
    if (cmd.write) {
      try { fs.writeFileSync(cmd.write, 'x'); wrote = true; } catch (e) { wrote = e.code; }
    }
    const env = {};
    for (const [k, v] of Object.entries(process.env)) if (k.startsWith('FN_') || k.startsWith('CFG_')) env[k] = v;
    const seen = {
      hostname: os.hostname(),
      uid: process.getuid(),
      env,
      headers: ctx.headers,
      method: gw.method,
      url: gw.requestURL,
      gwHeaders: gw.headers,
      callId: ctx.callID,
      body: input,
      wrote,
    };
    // A non-JSON content type wants a string body.
    return cmd.contentType ? JSON.stringify(seen) : seen;
  }, { inputMode: 'json' });
}
`;

export function probeImage(): Promise<string> {
  return ensureFunctionImage('probe', PROBE_FUNC_JS);
}
