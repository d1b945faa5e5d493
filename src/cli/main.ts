#!/usr/bin/env node
/**
 * cli/ — the `fnts` command line.
 */
import { Command } from 'commander';
import { compileConfig, ConfigError } from '../config/index.js';
import { startServer, VERSION } from '../server/index.js';

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
  const server = await startServer(config);
  let signals = 0;
  const stop = (signal: NodeJS.Signals): void => {
    signals++;
    if (signals > 1) {
      server.logger.warn({ signal }, 'second signal: exiting without waiting for in-flight work');
      process.exit(1);
    }
    server.logger.info({ signal }, 'shutting down: finishing in-flight requests');
    server.close().then(
      () => process.exit(0),
      (err: unknown) => {
        server.logger.error({ err }, 'shutdown failed');
        process.exit(1);
      },
    );
  };
  process.on('SIGTERM', stop);
  process.on('SIGINT', stop);
}

const program = new Command()
  .name('fnts')
  .description('fnts: a container-native serverless platform, compatible with the Fn Project')
  .version(VERSION, '-v, --version');

program
  .command('serve', { isDefault: true })
  .alias('start')
  .description('run the server (role from FN_NODE_TYPE, port from FN_PORT, data in FN_DB_URL)')
  .action(serve);

program.parseAsync(process.argv).catch((err: unknown) => {
  process.stderr.write(`fnts: ${err instanceof Error ? err.message : String(err)}\n`);
  process.exit(1);
});
