/**
 * FN_DB_URL in the forms Fn users already have:
 *
 *   sqlite3:///abs/path/fn.db   sqlite3://relative/fn.db   sqlite3://:memory:
 *   postgres://user:pass@host:5432/db?sslmode=disable      (also postgresql://, pgx://)
 *   mysql://user:pass@tcp(host:3306)/db?parseTime=true     (Go's MySQL driver form, as Fn passes it on)
 *   mysql://user:pass@host:3306/db                         (the plain form)
 *   mysql://user:pass@unix(/run/mysqld/mysqld.sock)/db
 *
 * Parsed once, at start: a URL that is not one of these stops the server
 * with what is wrong. The password is kept apart and never shown: every
 * message and log line uses `shown`, which has `***` in its place.
 */
import { resolve } from 'node:path';

export type DbLocation =
  | { readonly kind: 'sqlite'; readonly path: string; readonly shown: string }
  | {
      readonly kind: 'postgres';
      readonly host: string;
      readonly port: number;
      readonly user: string;
      readonly password: string | undefined;
      readonly database: string;
      /** sslmode (libpq's words): disable, allow, prefer, require, verify-ca, verify-full. */
      readonly sslmode: PgSslMode;
      readonly shown: string;
    }
  | {
      readonly kind: 'mysql';
      /** TCP host and port, or a unix socket path. */
      readonly host: string;
      readonly port: number;
      readonly socketPath: string | undefined;
      readonly user: string;
      readonly password: string | undefined;
      readonly database: string;
      /** tls=true|skip-verify|preferred (Go's driver's words); false: none. */
      readonly tls: 'true' | 'skip-verify' | 'preferred' | false;
      readonly shown: string;
    };

export type PgSslMode = 'disable' | 'allow' | 'prefer' | 'require' | 'verify-ca' | 'verify-full';
const SSL_MODES: readonly PgSslMode[] = ['disable', 'allow', 'prefer', 'require', 'verify-ca', 'verify-full'];

/** A FN_DB_URL that cannot be used; its message never holds the password. */
export class DbUrlError extends Error {
  override readonly name = 'DbUrlError';
}

const FORMS = 'use sqlite3:///path/to/fn.db, postgres://user:password@host:5432/database?sslmode=disable or mysql://user:password@tcp(host:3306)/database';

/** The URL with its password replaced by `***`: what messages and logs show. */
export function redactDbUrl(url: string): string {
  // user:password@ in either form; a password may itself hold '@' or ':' (Go's driver splits at the last '@').
  return url.replace(/^([a-z0-9+]+:\/\/[^:/@]*:)(.*)@(?=[^@]*$)/i, '$1***@');
}

function decode(part: string, what: string, shown: string): string {
  try {
    return decodeURIComponent(part);
  } catch {
    throw new DbUrlError(`FN_DB_URL=${shown}: its ${what} is not valid percent-encoding`);
  }
}

function portOf(raw: string | undefined, fallback: number, shown: string): number {
  if (raw === undefined || raw === '') return fallback;
  const port = /^\d{1,5}$/.test(raw) ? Number(raw) : NaN;
  if (!(port >= 1 && port <= 65535)) throw new DbUrlError(`FN_DB_URL=${shown}: port ${raw} is not a port number (1 to 65535)`);
  return port;
}

/** Splits `user:password@rest` at the last '@' (as Go's driver does: a password may hold '@'). */
function credentials(authority: string, shown: string): { user: string; password: string | undefined; rest: string } {
  const at = authority.lastIndexOf('@');
  if (at < 0) return { user: '', password: undefined, rest: authority };
  const userinfo = authority.slice(0, at);
  const colon = userinfo.indexOf(':');
  const user = decode(colon < 0 ? userinfo : userinfo.slice(0, colon), 'user name', shown);
  const password = colon < 0 ? undefined : decode(userinfo.slice(colon + 1), 'password', shown);
  return { user, password, rest: authority.slice(at + 1) };
}

function databaseName(path: string, shown: string): string {
  const name = decode(path.replace(/^\//, ''), 'database name', shown);
  if (name === '') throw new DbUrlError(`FN_DB_URL=${shown} names no database; add it after the host, e.g. …@host:5432/fnts`);
  if (name.includes('/')) throw new DbUrlError(`FN_DB_URL=${shown}: "${name}" is not a database name (it holds '/')`);
  return name;
}

function params(query: string | undefined): URLSearchParams {
  return new URLSearchParams(query ?? '');
}

function postgres(url: string, shown: string): DbLocation {
  const m = /^[a-z]+:\/\/([^/?#]*)(\/[^?#]*)?(?:\?([^#]*))?$/i.exec(url);
  if (!m) throw new DbUrlError(`FN_DB_URL=${shown} is not a Postgres URL; use postgres://user:password@host:5432/database?sslmode=disable`);
  const { user, password, rest } = credentials(m[1]!, shown);
  const hostPort = /^(\[[^\]]+\]|[^:]*)(?::(.*))?$/.exec(rest)!;
  const host = hostPort[1]!.replace(/^\[(.*)\]$/, '$1') || 'localhost';
  const q = params(m[3]);
  const sslmode = (q.get('sslmode') ?? 'prefer') as PgSslMode;
  if (!SSL_MODES.includes(sslmode)) throw new DbUrlError(`FN_DB_URL=${shown}: sslmode=${sslmode} is not one of ${SSL_MODES.join(', ')}`);
  return {
    kind: 'postgres',
    host,
    port: portOf(hostPort[2], 5432, shown),
    user: user || 'postgres',
    password,
    database: databaseName(m[2] ?? '', shown),
    sslmode,
    shown,
  };
}

function mysql(url: string, shown: string): DbLocation {
  const body = url.slice('mysql://'.length);
  // Go's form: [user[:password]@][net[(addr)]]/dbname[?params]; the path starts at the first '/' after the last '@'.
  const at = body.lastIndexOf('@');
  // An address in parentheses (unix(/path)) may hold '/': the path starts after its ')'.
  const open = /^[a-z0-9]+\(/i.test(body.slice(at + 1)) ? body.indexOf(')', at + 1) : at;
  const slash = body.indexOf('/', open + 1);
  if (slash < 0) throw new DbUrlError(`FN_DB_URL=${shown} names no database; use mysql://user:password@tcp(host:3306)/database`);
  const { user, password } = credentials(body.slice(0, slash), shown);
  const address = body.slice(at + 1, slash);
  const [path, query] = body.slice(slash).split('?', 2) as [string, string | undefined];
  const database = databaseName(path, shown);
  let host = 'localhost';
  let port = 3306;
  let socketPath: string | undefined;
  const net = /^(tcp|tcp6|unix)\((.*)\)$/.exec(address);
  if (net) {
    if (net[1] === 'unix') socketPath = net[2]!;
    else {
      const hp = /^(\[[^\]]+\]|[^:]*)(?::(.*))?$/.exec(net[2]!)!;
      host = hp[1]!.replace(/^\[(.*)\]$/, '$1') || 'localhost';
      port = portOf(hp[2], 3306, shown);
    }
  } else if (address !== '') {
    if (/[()]/.test(address)) throw new DbUrlError(`FN_DB_URL=${shown}: "${address}" is not an address; use tcp(host:3306) or host:3306`);
    const hp = /^(\[[^\]]+\]|[^:]*)(?::(.*))?$/.exec(address)!;
    host = hp[1]!.replace(/^\[(.*)\]$/, '$1') || 'localhost';
    port = portOf(hp[2], 3306, shown);
  }
  const tls = params(query).get('tls');
  if (tls !== null && !['true', 'false', 'skip-verify', 'preferred'].includes(tls)) {
    throw new DbUrlError(`FN_DB_URL=${shown}: tls=${tls} is not one of true, false, skip-verify, preferred`);
  }
  return {
    kind: 'mysql',
    host,
    port,
    socketPath,
    user: user || 'root',
    password,
    database,
    tls: tls === null || tls === 'false' ? false : (tls as 'true' | 'skip-verify' | 'preferred'),
    shown,
  };
}

/** Parses FN_DB_URL; a relative SQLite path is taken from `cwd`. Throws DbUrlError saying what is wrong. */
export function parseDbUrl(url: string, cwd: string = process.cwd()): DbLocation {
  const shown = redactDbUrl(url);
  const scheme = /^([a-z0-9+]+):\/\//i.exec(url)?.[1]?.toLowerCase();
  switch (scheme) {
    case 'sqlite3':
    case 'sqlite': {
      const rest = url.slice(url.indexOf('://') + 3).replace(/[?#].*$/, '');
      if (rest === ':memory:' || rest === '') return { kind: 'sqlite', path: ':memory:', shown };
      return { kind: 'sqlite', path: resolve(cwd, decode(rest, 'path', shown)), shown };
    }
    case 'postgres':
    case 'postgresql':
    case 'pgx':
      return postgres(url, shown);
    case 'mysql':
      return mysql(url, shown);
    case undefined:
      throw new DbUrlError(`FN_DB_URL=${shown} is not a URL; ${FORMS}`);
    default:
      throw new DbUrlError(`FN_DB_URL=${shown}: databases of kind "${scheme}" are not supported; ${FORMS}`);
  }
}
