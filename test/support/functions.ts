/**
 * Test functions, written with the official Node FDK as Fn users write them.
 *
 * `probe` does what its JSON input asks, so one image covers every behaviour
 * the tests need:
 *   {"title": "text"}        show text as the process title (`docker top`)
 *                            the moment the call arrives: how a test sees,
 *                            from outside, that the call is running. At most
 *                            12 characters, the length of `node func.js`.
 *   {"sleep": ms}            answer after a while
 *   {"exit": code}           die in the middle of the call
 *   {"bytes": n}             answer with n bytes
 *   {"alloc": mb}            use that much memory first
 *   {"status": 201, "headers": {"X-A": "1"}, "contentType": "text/plain"}
 *                            answer through the HTTP gateway (triggers)
 *   {"write": "/path"}       try to write a file, report whether it worked
 *   {"log": "text", "logBytes": n}
 *                            write "text" as a line to stdout and stderr, then n bytes to stderr
 *   {"lines": n}             write n lines "line 0" ... "line n-1" to stderr, at once
 * and always reports what it saw: container hostname, uid, the FN_* and
 * config environment, the request headers, the gateway's method/URL/headers,
 * the call id and the body. The config variable MODE changes how it starts:
 *   MODE=never-ready         never binds the FDK socket
 *   MODE=exit-on-start       exits at once
 *   MODE=slow-ready          binds the FDK socket after READY_AFTER_MS
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
  setTimeout(serve, process.env.MODE === 'slow-ready' ? Number(process.env.READY_AFTER_MS) : 0);
}

function serve() {
  fdk.handle(async function (input, ctx) {
    const cmd = input && typeof input === 'object' ? input : {};
    if (cmd.title) process.title = cmd.title;
    if (cmd.log) { process.stdout.write(cmd.log + ' (stdout)\\n'); process.stderr.write(cmd.log + ' (stderr)\\n'); }
    if (cmd.logBytes) process.stderr.write('y'.repeat(cmd.logBytes));
    if (cmd.lines) { let text = ''; for (let i = 0; i < cmd.lines; i++) text += 'line ' + i + '\\n'; process.stderr.write(text); }
    if (cmd.sleep) await new Promise((r) => setTimeout(r, cmd.sleep));
    if (cmd.exit !== undefined) process.exit(cmd.exit);
    if (cmd.throw) throw new Error(cmd.throw);
    if (cmd.alloc) { const keep = []; for (let i = 0; i < cmd.alloc; i++) keep.push(Buffer.alloc(1 << 20, 1)); }
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

/** An image whose entrypoint does not exist: the engine refuses to start its containers. */
export function missingEntrypointImage(): Promise<string> {
  return ensureFunctionImage('no-entrypoint', PROBE_FUNC_JS, {}, ['/function/not-there']);
}

export function probeImage(): Promise<string> {
  return ensureFunctionImage('probe', PROBE_FUNC_JS);
}

/**
 * A cold (`default` format) function: reads its whole stdin, answers on
 * stdout with what it saw (FN_* environment, body), logs a line on stderr.
 * Its input may ask it to {"sleep": ms}, {"exit": code} (after answering),
 * {"bytes": n} (answer n bytes) or {"alloc": mb} (use that much memory).
 */
export const COLD_FUNC_JS = `const chunks = [];
process.stdin.on('data', (c) => chunks.push(c));
process.stdin.on('end', async () => {
  const text = Buffer.concat(chunks).toString();
  let cmd = {};
  try { cmd = JSON.parse(text); } catch {}
  if (cmd.sleep) await new Promise((r) => setTimeout(r, cmd.sleep));
  if (cmd.alloc) { const keep = []; for (let i = 0; i < cmd.alloc; i++) keep.push(Buffer.alloc(1 << 20, 1)); }
  if (cmd.bytes) { process.stdout.write(Buffer.alloc(cmd.bytes, 'x')); return; }
  const env = {};
  for (const [k, v] of Object.entries(process.env)) if (k.startsWith('FN_')) env[k] = v;
  process.stderr.write('cold log line\\n');
  process.stdout.write(JSON.stringify({ env, body: text, host: require('os').hostname() }));
  if (cmd.exit !== undefined) process.exitCode = cmd.exit;
});
`;

/**
 * A hot \`json\` format function (one JSON object per line on stdin, one per
 * answer on stdout). The call's body may ask it to {"sleep": ms},
 * {"status": n, "headers": {...}}, {"garbage": true} (write an object nobody
 * asked for after answering) or {"exit": code}.
 */
export const JSON_FUNC_JS = `const readline = require('readline');
let n = 0;
const queue = [];
let busy = false;
readline.createInterface({ input: process.stdin }).on('line', (line) => { queue.push(line); next(); });
async function next() {
  if (busy || queue.length === 0) return;
  busy = true;
  const call = JSON.parse(queue.shift());
  n++;
  let cmd = {};
  try { cmd = JSON.parse(call.body); } catch {}
  if (cmd.sleep) await new Promise((r) => setTimeout(r, cmd.sleep));
  if (cmd.exit !== undefined) process.exit(cmd.exit);
  const out = { body: JSON.stringify({ n, host: require('os').hostname(), got: call }), content_type: 'application/json', protocol: { status_code: cmd.status || 200, headers: cmd.headers || {} } };
  // Garbage goes out in the same write as the answer, as a function that prints twice would.
  process.stdout.write(JSON.stringify(out) + '\\n' + (cmd.garbage ? '{"unasked": true}\\n' : ''));
  busy = false;
  next();
}
`;

/** A hot \`cloudevent\` format function: answers each event with its data wrapped. */
export const CLOUDEVENT_FUNC_JS = `const readline = require('readline');
let n = 0;
readline.createInterface({ input: process.stdin }).on('line', (line) => {
  const ev = JSON.parse(line);
  n++;
  const out = { ...ev, contentType: 'application/json', data: { n, host: require('os').hostname(), eventID: ev.eventID, seen: ev },
    extensions: { ...ev.extensions, protocol: { status_code: 202, headers: { 'X-Event': [ev.eventID] } } } };
  process.stdout.write(JSON.stringify(out) + '\\n');
});
`;

/**
 * A hot \`http\` format function: reads HTTP/1.1 requests from stdin (with
 * Content-Length), answers each with an HTTP/1.1 response on stdout
 * describing the request.
 */
export const HTTP_FUNC_JS = `let buf = Buffer.alloc(0);
let n = 0;
process.stdin.on('data', (c) => { buf = Buffer.concat([buf, c]); drain(); });
function drain() {
  for (;;) {
    const end = buf.indexOf('\\r\\n\\r\\n');
    if (end < 0) return;
    const lines = buf.subarray(0, end).toString('latin1').split('\\r\\n');
    const [method, target] = lines[0].split(' ');
    const headers = {};
    for (const l of lines.slice(1)) { const i = l.indexOf(':'); headers[l.slice(0, i)] = l.slice(i + 1).trim(); }
    const len = Number(headers['Content-Length'] || 0);
    if (buf.length < end + 4 + len) return;
    const body = buf.subarray(end + 4, end + 4 + len).toString();
    buf = buf.subarray(end + 4 + len);
    n++;
    const answer = JSON.stringify({ n, host: require('os').hostname(), method, target, headers, body });
    process.stdout.write('HTTP/1.1 201 Created\\r\\nContent-Type: application/json\\r\\nX-Seen: yes\\r\\nContent-Length: ' + Buffer.byteLength(answer) + '\\r\\n\\r\\n' + answer);
  }
}
`;

export const formatImages = {
  cold: () => ensureFunctionImage('cold', COLD_FUNC_JS),
  json: () => ensureFunctionImage('json', JSON_FUNC_JS),
  cloudevent: () => ensureFunctionImage('cloudevent', CLOUDEVENT_FUNC_JS),
  http: () => ensureFunctionImage('http', HTTP_FUNC_JS),
};

/**
 * Reports what it finds under /run/secrets (its fn's secrets): each file's
 * SHA-256 (never the value itself, so the value shows in no answer, log or
 * record), size, mode, and whether it can be written; whether a file can be
 * created there; the mount as the container sees it; and the SHA-256 of
 * every environment variable's value (a secret must be none of them). It
 * logs the digests on stderr. Hot (http-stream) under the FDK, or cold
 * when its fn's format is `default` (the same answer on stdout).
 */
export const SECRETS_FUNC_JS = `const fs = require('fs');
const crypto = require('crypto');
const os = require('os');
const hash = (v) => crypto.createHash('sha256').update(v).digest('hex');
function look() {
  const dir = '/run/secrets';
  let names;
  try { names = fs.readdirSync(dir).sort(); } catch (e) { names = e.code; }
  const files = {};
  if (Array.isArray(names)) for (const n of names) {
    const p = dir + '/' + n;
    const value = fs.readFileSync(p);
    let write;
    try { fs.writeFileSync(p, 'x'); write = 'written'; } catch (e) { write = e.code; }
    files[n] = { sha256: hash(value), bytes: value.length, mode: (fs.statSync(p).mode & 0o777).toString(8), write };
  }
  let create;
  try { fs.writeFileSync(dir + '/new', 'x'); create = 'written'; } catch (e) { create = e.code; }
  let mount;
  try { mount = fs.readFileSync('/proc/self/mounts', 'utf8').split('\\n').find((l) => l.split(' ')[1] === dir); } catch (e) { mount = e.code; }
  const seen = { host: os.hostname(), files, create, mount, env: Object.values(process.env).map(hash) };
  process.stderr.write('secrets seen: ' + JSON.stringify(files) + '\\n');
  return seen;
}
if (process.env.FN_FORMAT === 'default') {
  process.stdin.resume();
  process.stdin.on('end', () => process.stdout.write(JSON.stringify(look())));
} else {
  require('@fnproject/fdk').handle(async () => look(), { inputMode: 'json' });
}
`;

export function secretsImage(): Promise<string> {
  return ensureFunctionImage('secrets', SECRETS_FUNC_JS);
}

/**
 * `netprobe`: what a function can reach on the network, tried from inside
 * its container. It listens on NETPROBE_PORT itself (so that another
 * function can try to reach it) and answers each call with its own address
 * and gateway (`self`), whether IPv6 is off, and how each of its input's
 * attempts ended, each bounded by `timeoutMs` (default 2000):
 *   {"connect": [{"host": "gateway" | "a.b.c.d", "port": n}],   TCP connects: "connected", or the error's code
 *    "lookup": ["name"]}                                         DNS (resolve4): "resolved", or the error's code (ENOTFOUND: the resolver answered NXDOMAIN)
 * with the time each took (`ms`).
 */
export const NETPROBE_FUNC_JS = `const fdk = require('@fnproject/fdk');
const dns = require('dns');
const fs = require('fs');
const net = require('net');
const os = require('os');

net.createServer((s) => s.end('peer\\n')).listen(Number(process.env.NETPROBE_PORT || 7777), '0.0.0.0');

function self() {
  const eth = (os.networkInterfaces().eth0 || []).find((a) => a.family === 'IPv4');
  let gateway;
  for (const line of fs.readFileSync('/proc/net/route', 'utf8').split('\\n').slice(1)) {
    const f = line.trim().split(/\\s+/);
    if (f[1] === '00000000' && f[2]) gateway = [6, 4, 2, 0].map((i) => parseInt(f[2].slice(i, i + 2), 16)).join('.');
  }
  let ipv6 = 'on';
  try { if (fs.readFileSync('/proc/sys/net/ipv6/conf/all/disable_ipv6', 'utf8').trim() === '1') ipv6 = 'off'; } catch { ipv6 = 'absent'; }
  return { address: eth && eth.address, gateway, ipv6 };
}

function connect(host, port, timeoutMs) {
  const t0 = Date.now();
  return new Promise((resolve) => {
    const s = net.connect({ host, port });
    const done = (outcome) => { clearTimeout(timer); s.destroy(); resolve({ host, port, outcome, ms: Date.now() - t0 }); };
    const timer = setTimeout(() => done('timeout'), timeoutMs);
    s.once('connect', () => done('connected'));
    s.once('error', (e) => done(e.code || e.message));
  });
}

function lookup(name, timeoutMs) {
  const t0 = Date.now();
  const resolver = new dns.Resolver({ timeout: timeoutMs, tries: 1 });
  return new Promise((resolve) => resolver.resolve4(name, (err) => resolve({ name, outcome: err ? err.code : 'resolved', ms: Date.now() - t0 })));
}

fdk.handle(async function (input) {
  const cmd = input && typeof input === 'object' ? input : {};
  const me = self();
  const timeoutMs = cmd.timeoutMs || 2000;
  const connects = await Promise.all((cmd.connect || []).map((t) => connect(t.host === 'gateway' ? me.gateway : t.host, t.port, timeoutMs)));
  const lookups = await Promise.all((cmd.lookup || []).map((n) => lookup(n, timeoutMs)));
  return { self: me, connects, lookups };
}, { inputMode: 'json' });
`;

/** The port a netprobe function listens on. */
export const NETPROBE_PORT = 7777;

export function netprobeImage(): Promise<string> {
  return ensureFunctionImage('netprobe', NETPROBE_FUNC_JS);
}
