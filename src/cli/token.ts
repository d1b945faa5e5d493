/**
 * `fnts token create|list|revoke`: API tokens managed through the API
 * (FN_API_URL, default http://localhost:8080, with FN_TOKEN: an admin
 * token), as the fn CLI talks to it.
 */
import type { Command } from 'commander';
import { ROLES } from '../auth/index.js';

interface Target {
  readonly url: string;
  readonly token: string | undefined;
}

function target(): Target {
  const url = (process.env['FN_API_URL'] ?? 'http://localhost:8080').replace(/\/+$/, '');
  const token = process.env['FN_TOKEN']?.trim() || undefined;
  return { url, token };
}

/** Thrown for an answer the user must act on: printed as is, exit 1. */
class CliError extends Error {}

type Json = Record<string, any>; // eslint-disable-line @typescript-eslint/no-explicit-any -- the API's answers, read field by field

async function api(method: string, path: string, body?: unknown): Promise<Json> {
  const { url, token } = target();
  let res: Response;
  try {
    res = await fetch(`${url}${path}`, {
      method,
      headers: { accept: 'application/json', ...(body === undefined ? {} : { 'content-type': 'application/json' }), ...(token ? { authorization: `Bearer ${token}` } : {}) },
      ...(body === undefined ? {} : { body: JSON.stringify(body) }),
      signal: AbortSignal.timeout(30_000),
    });
  } catch (err) {
    throw new CliError(`cannot reach the fnts API at ${url} (${(err as Error).message}); set FN_API_URL to the server's URL`);
  }
  const text = await res.text();
  let json: Json | undefined;
  try {
    json = text === '' ? undefined : JSON.parse(text);
  } catch {
    json = undefined;
  }
  if (res.ok) return json ?? {};
  const said: unknown = json?.message;
  const message = typeof said === 'string' ? said : `${res.status} ${text}`;
  const hint =
    res.status === 401
      ? token
        ? ' (FN_TOKEN is not a token this server knows)'
        : ' (set FN_TOKEN to an admin token, e.g. export FN_TOKEN=$(cat data/admin.token))'
      : res.status === 403
        ? ' (FN_TOKEN must be an admin token)'
        : '';
  throw new CliError(`${message}${hint}`);
}

function print(rows: Array<Record<string, unknown>>): void {
  const columns = ['id', 'name', 'role', 'apps', 'created_at', 'expires_at'];
  const cells = rows.map((r) => columns.map((c) => (Array.isArray(r[c]) ? (r[c] as string[]).join(',') : String(r[c] ?? '-'))));
  const widths = columns.map((c, i) => Math.max(c.length, ...cells.map((row) => row[i]!.length)));
  const line = (values: string[]): string =>
    values
      .map((v, i) => v.padEnd(widths[i]!))
      .join('  ')
      .trimEnd();
  process.stdout.write(`${line(columns.map((c) => c.toUpperCase()))}\n`);
  for (const row of cells) process.stdout.write(`${line(row)}\n`);
}

async function run(action: () => Promise<void>): Promise<void> {
  try {
    await action();
  } catch (err) {
    if (!(err instanceof CliError)) throw err;
    process.stderr.write(`fnts: ${err.message}\n`);
    process.exitCode = 1;
  }
}

export function registerTokenCommands(program: Command): void {
  const token = program.command('token').description('manage API tokens (talks to FN_API_URL with FN_TOKEN, an admin token)');

  token
    .command('create')
    .description('make a token; it is shown this once')
    .requiredOption('--name <name>', 'what the token is for, e.g. ci-deploy')
    .option('--role <role>', `one of ${ROLES.join(', ')}`, 'developer')
    .option('--apps <names>', 'limit it to these apps (comma separated)')
    .option('--expires-at <time>', 'RFC 3339 time it stops working, e.g. 2027-01-01T00:00:00Z')
    .option('--quiet', 'print only the token (for scripts: export FN_TOKEN=$(fnts token create ... --quiet))')
    .action((o: { name: string; role: string; apps?: string; expiresAt?: string; quiet?: boolean }) =>
      run(async () => {
        const made = await api('POST', '/v2/tokens', {
          name: o.name,
          role: o.role,
          ...(o.apps
            ? {
                apps: o.apps
                  .split(',')
                  .map((a) => a.trim())
                  .filter(Boolean),
              }
            : {}),
          ...(o.expiresAt ? { expires_at: o.expiresAt } : {}),
        });
        if (o.quiet) {
          process.stdout.write(`${made.token}\n`);
          return;
        }
        print([made]);
        process.stdout.write(`\ntoken (shown once, keep it now): ${made.token}\n`);
      }),
    );

  token
    .command('list')
    .description('list tokens (never their secrets)')
    .option('--output <format>', 'table or json', 'table')
    .action((o: { output: string }) =>
      run(async () => {
        const { items } = (await api('GET', '/v2/tokens')) as { items: Json[] };
        if (o.output === 'json') process.stdout.write(`${JSON.stringify(items, null, 2)}\n`);
        else print(items);
      }),
    );

  token
    .command('revoke')
    .description('revoke a token by its id (every node sharing the database refuses it within a second)')
    .argument('<id>', "the token's id (fnts token list)")
    .action((id: string) =>
      run(async () => {
        await api('DELETE', `/v2/tokens/${encodeURIComponent(id)}`);
        process.stdout.write(`revoked ${id}\n`);
      }),
    );
}
