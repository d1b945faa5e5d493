import { describe, expect, it } from 'vitest';
import { compileConfig, ConfigError } from './config.js';
import { DbUrlError, parseDbUrl, redactDbUrl } from './db-url.js';

describe('FN_DB_URL', () => {
  it("reads Fn's Postgres form, pgx:// too", () => {
    expect(parseDbUrl('postgres://fn:s3cret@db.example:5433/fnts?sslmode=disable')).toEqual({
      kind: 'postgres',
      host: 'db.example',
      port: 5433,
      user: 'fn',
      password: 's3cret',
      database: 'fnts',
      sslmode: 'disable',
      shown: 'postgres://fn:***@db.example:5433/fnts?sslmode=disable',
    });
    expect(parseDbUrl('pgx://fn@db/fnts')).toMatchObject({ kind: 'postgres', host: 'db', port: 5432, user: 'fn', password: undefined, sslmode: 'prefer' });
    expect(parseDbUrl('postgresql://u:p%40ss@[::1]:5432/d')).toMatchObject({ host: '::1', password: 'p@ss' });
  });

  it("reads Go's MySQL driver form as Fn passes it on, the plain form, and a unix socket", () => {
    expect(parseDbUrl('mysql://root:pa@ss@tcp(mysql:3307)/funcs?parseTime=true')).toEqual({
      kind: 'mysql',
      host: 'mysql',
      port: 3307,
      socketPath: undefined,
      user: 'root',
      password: 'pa@ss',
      database: 'funcs',
      tls: false,
      shown: 'mysql://root:***@tcp(mysql:3307)/funcs?parseTime=true',
    });
    expect(parseDbUrl('mysql://u:p@db.example/funcs')).toMatchObject({ host: 'db.example', port: 3306, database: 'funcs' });
    expect(parseDbUrl('mysql://u:p@db.example:3310/funcs?tls=skip-verify')).toMatchObject({ port: 3310, tls: 'skip-verify' });
    expect(parseDbUrl('mysql://u@unix(/run/mysqld/mysqld.sock)/funcs')).toMatchObject({ socketPath: '/run/mysqld/mysqld.sock', password: undefined });
  });

  it('reads sqlite3 paths as before', () => {
    expect(parseDbUrl('sqlite3:///var/lib/fn/fn.db')).toMatchObject({ kind: 'sqlite', path: '/var/lib/fn/fn.db' });
    expect(parseDbUrl('sqlite3://data/fn.db', '/srv')).toMatchObject({ kind: 'sqlite', path: '/srv/data/fn.db' });
    expect(parseDbUrl('sqlite3://:memory:')).toMatchObject({ kind: 'sqlite', path: ':memory:' });
  });

  it('refuses what it cannot use, saying what is wrong, never with the password', () => {
    const cases: [string, RegExp][] = [
      ['oracle://u:hunter2@h/db', /databases of kind "oracle" are not supported; use sqlite3:/],
      ['postgres://u:hunter2@h:5432', /names no database/],
      ['postgres://u:hunter2@h:99999/db', /port 99999 is not a port number/],
      ['postgres://u:hunter2@h/db?sslmode=sometimes', /sslmode=sometimes is not one of/],
      ['mysql://u:hunter2@tcp(h:3306)', /names no database/],
      ['mysql://u:hunter2@h/db?tls=maybe', /tls=maybe is not one of/],
      ['just-a-path', /is not a URL/],
    ];
    for (const [url, why] of cases) {
      let error: unknown;
      try {
        parseDbUrl(url);
      } catch (err) {
        error = err;
      }
      expect(error, url).toBeInstanceOf(DbUrlError);
      expect((error as Error).message, url).toMatch(why);
      expect((error as Error).message, url).not.toContain('hunter2');
    }
  });

  it('hides the password of every form', () => {
    expect(redactDbUrl('postgres://fn:p:a@ss@h/db')).toBe('postgres://fn:***@h/db');
    expect(redactDbUrl('mysql://u:x@tcp(h:1)/d')).toBe('mysql://u:***@tcp(h:1)/d');
    expect(redactDbUrl('postgres://h:5432/db')).toBe('postgres://h:5432/db');
    expect(redactDbUrl('sqlite3:///a/b.db')).toBe('sqlite3:///a/b.db');
  });

  it('stops the server at start on a bad URL, and keeps the data directory for a server database', () => {
    expect(() => compileConfig({ FN_DB_URL: 'postgres://u:hunter2@h' }, '/srv')).toThrow(ConfigError);
    expect(() => compileConfig({ FN_DB_URL: 'postgres://u:hunter2@h' }, '/srv')).toThrow(/^(?!.*hunter2).*names no database/);
    const c = compileConfig({ FN_DB_URL: 'postgres://u:pw@h/fnts', FNTS_DB_POOL_SIZE: '4' }, '/srv');
    expect(c.db).toMatchObject({ kind: 'postgres', database: 'fnts' });
    expect(c.dbPoolSize).toBe(4);
    expect(c.dataDir).toBe('/srv/data');
    // Whose containers: the same database however the password is written.
    expect(compileConfig({ FN_DB_URL: 'postgres://u:other@h/fnts' }, '/srv').agent.owner).toBe(c.agent.owner);
  });
});
