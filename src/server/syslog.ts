/**
 * Syslog forwarding: an app's `syslog_url` (tcp://, udp://, tcp+tls://,
 * unix://) receives every line its functions' containers write during a
 * call, as RFC 5424 messages tagged with the app, fn and call:
 *
 *   <14>1 2026-11-23T10:00:00.000Z fnts fnts - - - app_name=shop fn_name=cart call_id=01J... the line
 *
 * A call listener (onCallLog), so lines leave once the call's log is
 * complete. Connections are kept per URL and made again after a failure;
 * lines for a destination that does not answer are dropped (counted and
 * logged once a minute at most), never queued without bound: a log server
 * that is down must not cost the fnts server its memory.
 */
import { createSocket, type Socket as UdpSocket } from 'node:dgram';
import { connect as netConnect, type Socket } from 'node:net';
import { hostname } from 'node:os';
import { connect as tlsConnect } from 'node:tls';
import type { Logger } from 'pino';
import type { CallListener } from '../agent/index.js';
import { isoTime, type Call } from '../models/index.js';

/** user facility (1) * 8 + informational (6). */
const PRI = 14;
/** Bytes waiting on one stream connection before further lines are dropped. */
const MAX_PENDING_BYTES = 1024 * 1024;
const WARN_EVERY_MS = 60_000;

interface Destination {
  send(message: string): void;
  close(): void;
}

export class SyslogForwarder implements CallListener {
  private readonly destinations = new Map<string, Destination>();
  private readonly host = hostname() || 'fnts';
  private dropped = 0;
  private lastWarning = 0;

  constructor(private readonly log: Logger) {}

  onCallLog(call: Call, text: string): void {
    const url = call.fn.syslogUrl;
    if (!url || text === '') return;
    const destination = this.destination(url.trim());
    if (!destination) return;
    const prefix = `<${PRI}>1 ${isoTime(Date.now())} ${this.host} fnts - - - app_name=${call.fn.appName} fn_name=${call.fn.fnName} call_id=${call.id} `;
    for (const line of text.split('\n')) if (line !== '') destination.send(prefix + line);
  }

  private destination(url: string): Destination | undefined {
    let d = this.destinations.get(url);
    if (d) return d;
    try {
      d = this.open(new URL(url));
    } catch (err) {
      this.warn(`cannot send function logs to ${url}: ${err instanceof Error ? err.message : String(err)}`);
      return undefined;
    }
    this.destinations.set(url, d);
    return d;
  }

  private open(url: URL): Destination {
    const scheme = url.protocol.replace(/:$/, '').toLowerCase();
    const port = Number(url.port || 514);
    switch (scheme) {
      case 'udp':
        return this.udp(url.hostname, port);
      case 'tcp':
        return this.stream(() => netConnect({ host: url.hostname, port }));
      case 'tcp+tls':
      case 'tls':
        return this.stream(() => tlsConnect({ host: url.hostname, port: Number(url.port || 6514), servername: url.hostname }));
      case 'unix':
        return this.stream(() => netConnect({ path: url.pathname }));
      default:
        throw new Error(`the ${scheme} scheme is not supported here; use tcp, udp, tcp+tls or unix`);
    }
  }

  private udp(host: string, port: number): Destination {
    let socket: UdpSocket | undefined;
    return {
      send: (message) => {
        if (!socket) {
          socket = createSocket(host.includes(':') ? 'udp6' : 'udp4');
          socket.on('error', (err) => this.warn(`syslog udp://${host}:${port}: ${err.message}`));
          socket.unref();
        }
        socket.send(message, port, host, (err) => {
          if (err) this.drop(1, `syslog udp://${host}:${port}: ${err.message}`);
        });
      },
      close: () => socket?.close(),
    };
  }

  /** A stream connection made on first use and again after it fails; newline-framed messages. */
  private stream(open: () => Socket): Destination {
    let socket: Socket | undefined;
    const ensure = (): Socket => {
      if (socket && !socket.destroyed) return socket;
      const s = open();
      s.setKeepAlive(true);
      s.unref();
      s.on('error', (err) => this.warn(`syslog connection failed: ${err.message}`));
      s.on('close', () => {
        if (socket === s) socket = undefined;
      });
      socket = s;
      return s;
    };
    return {
      send: (message) => {
        const s = ensure();
        if (s.writableLength > MAX_PENDING_BYTES) {
          this.drop(1, 'syslog destination is not keeping up');
          return;
        }
        s.write(`${message}\n`);
      },
      close: () => socket?.end(),
    };
  }

  private drop(n: number, why: string): void {
    this.dropped += n;
    this.warn(`${why}; ${this.dropped} log lines dropped so far`);
  }

  private warn(message: string): void {
    const now = Date.now();
    if (now - this.lastWarning < WARN_EVERY_MS) return;
    this.lastWarning = now;
    this.log.warn(message);
  }

  close(): void {
    for (const d of this.destinations.values()) d.close();
    this.destinations.clear();
  }
}
