#!/usr/bin/env node
/**
 * cli/ — the `fnts` command line.
 */
import { setFlagsFromString } from 'node:v8';
import { Command } from 'commander';
import { compileConfig, ConfigError, type Config } from '../config/index.js';
import { startServer, type RunningServer } from '../roles/index.js';
import { VERSION } from '../server/index.js';
import { Deadline } from '../time/index.js';
import { registerTokenCommands } from './token.js';

/**
 * How far V8 lets the heap grow past what was live at the last full
 * collection, in percent. On a host with memory to spare (a heap limit of
 * 2 GB or more) V8 allows up to 300; under a server's steady churn (each
 * call's objects, short-lived) that is memory held for garbage: a node
 * draining a backlog of detached calls sat at 305-316 MB RSS for ~45 MB
 * live. At 100, what V8 allows itself on smaller hosts, the same run peaked
 * at 227-229 MB for the same CPU per call (bench:detached, SQLite, two runs
 * each). Not a limit: the heap grows as far as the load needs.
 */
const HEAP_GROWING_PERCENT = 100;

/** Applies HEAP_GROWING_PERCENT, unless node was started with a --heap-growing-percent of the operator's own. */
function boundHeapGrowth(): void {
  if (process.execArgv.some((a) => /^--heap[-_]growing[-_]percent\b/.test(a))) return;
  setFlagsFromString(`--heap-growing-percent=${HEAP_GROWING_PERCENT}`);
}

/** After the calls are cut, how long removing the containers may take before the process exits anyway. */
const CLEANUP_BOUND_MS = 15_000;

/**
 * Stops the server on SIGTERM/SIGINT, boundedly:
 *   1st signal  stop accepting; calls in flight get FNTS_DRAIN_TIMEOUT_MSECS
 *               to finish, then they are cut; every container is removed
 *   2nd signal  cut the calls in flight now; containers are still removed
 *   3rd signal  exit at once (the next start removes what is left)
 * Whatever happens, the process exits within the drain time plus
 * CLEANUP_BOUND_MS of the first signal.
 */
function stopOnSignals(server: RunningServer, config: Config): (signal: NodeJS.Signals) => void {
  const log = server.logger;
  let signals = 0;
  let deadline: Deadline | undefined;
  const cut = (why: string): void => {
    log.warn(why);
    server.abort();
    deadline ??= new Deadline(
      CLEANUP_BOUND_MS,
      () => {
        log.error(`containers not all removed within ${CLEANUP_BOUND_MS / 1000}s: exiting; the next start removes what is left`);
        process.exit(1);
      },
      { unref: true },
    );
  };
  const stop = (signal: NodeJS.Signals): void => {
    signals++;
    if (signals === 1) {
      log.info({ signal }, `shutting down: calls in flight have ${config.drainTimeoutMs / 1000}s to finish (send ${signal} again to cut them now)`);
      new Deadline(config.drainTimeoutMs, () => cut(`calls still running after ${config.drainTimeoutMs / 1000}s: cutting them and removing containers`), { unref: true });
      server.close().then(
        () => process.exit(0),
        (err: unknown) => {
          log.error({ err }, 'shutdown failed');
          process.exit(1);
        },
      );
    } else if (signals === 2) {
      cut(`second ${signal}: cutting calls in flight and removing containers (a third signal exits at once)`);
    } else {
      log.warn({ signal }, 'third signal: exiting now; containers left behind are removed at the next start');
      process.exit(1);
    }
  };
  process.on('SIGTERM', stop);
  process.on('SIGINT', stop);
  return stop;
}

/**
 * A bug in fnts must not take the functions down with it: an unhandled
 * rejection is logged loudly and the server goes on; an uncaught exception
 * leaves the process in an unknown state, so the server stops, boundedly,
 * removing its containers.
 */
function reportFaults(server: RunningServer): void {
  process.on('unhandledRejection', (reason) => {
    server.logger.error({ err: reason }, 'unhandled rejection (a bug in fnts: please report it); the server keeps serving');
  });
  process.on('uncaughtException', (err) => {
    server.logger.fatal({ err }, 'uncaught exception (a bug in fnts: please report it); stopping');
    server.abort();
    new Deadline(CLEANUP_BOUND_MS, () => process.exit(1), { unref: true });
    void server.close().finally(() => process.exit(1));
  });
}

async function serve(): Promise<void> {
  let config;
  try {
    config = compileConfig();
  } catch (err) {
    if (err instanceof ConfigError) {
      process.stderr.write(`fnts: ${err.message}\n`);
      process.exit(2);
    }
    throw err;
  }
  boundHeapGrowth();
  // A signal during the start is kept, and served once the server is up: without a listener the
  // process would die of it at once (its default action), containers and all, and the start
  // announces "fnts serving" a moment before the listeners below are in place. A second one
  // exits at once (a start may wait a minute for its database).
  let early: NodeJS.Signals | undefined;
  const keep = (signal: NodeJS.Signals): void => {
    if (early) process.exit(1);
    early = signal;
    process.stderr.write(`fnts: ${signal} while starting: stopping as soon as the server is up (send ${signal} again to exit now)\n`);
  };
  process.on('SIGTERM', keep);
  process.on('SIGINT', keep);
  const server = await startServer(config);
  reportFaults(server);
  const stop = stopOnSignals(server, config);
  process.off('SIGTERM', keep);
  process.off('SIGINT', keep);
  if (early) stop(early);
}

const program = new Command().name('fnts').description('fnts: a container-native serverless platform, compatible with the Fn Project').version(VERSION, '-v, --version');

program.command('serve', { isDefault: true }).alias('start').description('run the server (role from FN_NODE_TYPE, port from FN_PORT, data in FN_DB_URL)').action(serve);
registerTokenCommands(program);

/** A comma separated list, blanks dropped. */
const list = (value: string): string[] =>
  value
    .split(',')
    .map((x) => x.trim())
    .filter(Boolean);

program
  .command('certs')
  .description('make a CA and a key and certificate per fleet node, for mutual TLS between LBs, runners and the pool manager (FNTS_GRPC_TLS_*)')
  .requiredOption('--out <dir>', 'the folder for the files (a folder holding ca.crt and ca.key signs with that CA)')
  .requiredOption('--names <names>', 'the nodes, comma separated (each a DNS name in its certificate, and its files: <name>.crt, <name>.key)', list)
  .option('--hosts <hosts>', 'more DNS names and IP addresses every certificate carries: where nodes are dialled, comma separated', list, [])
  .option('--days <days>', "how long the nodes' certificates last", Number, 825)
  .option('--ca-days <days>', 'how long a new CA lasts', Number, 3650)
  .action(async (o: { out: string; names: string[]; hosts: string[]; days: number; caDays: number }) => {
    // Loaded here only: the X.509 library and its polyfill never touch a server.
    const { CertsError, makeCerts } = await import('./certs.js');
    try {
      await makeCerts(o);
    } catch (err) {
      if (err instanceof CertsError) {
        process.stderr.write(`fnts: ${err.message}\n`);
        process.exit(2);
      }
      throw err;
    }
  });

program.parseAsync(process.argv).catch((err: unknown) => {
  process.stderr.write(`fnts: ${err instanceof Error ? err.message : String(err)}\n`);
  process.exit(1);
});
