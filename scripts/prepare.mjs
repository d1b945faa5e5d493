#!/usr/bin/env node
// Makes `npm start` and `npm test` work as the first command on a fresh clone:
// installs dependencies when they are missing or older than the lock file,
// generates the wire messages' code (src/rpc/gen/) when proto/ changed, and
// compiles src/ to dist/ when any source is newer than the last build (always
// with --build: `npm run build`; never with --no-dist: `npm run test:unit`,
// whose tests run src/ itself, would wait for a compile it does not use).
// Only Node built-ins may be used here: nothing else is installed yet.
import { spawnSync } from 'node:child_process';
import { cpSync, existsSync, lstatSync, readdirSync, statSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { GEN_DIR, generate, staleProtos } from './proto-gen.mjs';

const root = join(dirname(fileURLToPath(import.meta.url)), '..');
const say = (msg) => process.stderr.write(`fnts: ${msg}\n`);

function mtime(path) {
  try {
    return statSync(path).mtimeMs;
  } catch {
    return 0;
  }
}

function newestUnder(dir) {
  let newest = 0;
  for (const entry of readdirSync(dir, { withFileTypes: true })) {
    const path = join(dir, entry.name);
    newest = Math.max(newest, entry.isDirectory() ? newestUnder(path) : mtime(path));
  }
  return newest;
}

function run(cmd, args, what) {
  const started = Date.now();
  say(`${what}...`);
  const result = spawnSync(cmd, args, { cwd: root, stdio: ['ignore', 'inherit', 'inherit'] });
  if (result.status !== 0) {
    say(`${what} failed (exit ${result.status ?? result.signal}). Fix the error above and run the command again.`);
    process.exit(1);
  }
  say(`${what}: done in ${((Date.now() - started) / 1000).toFixed(1)}s`);
}

const installedMarker = join(root, 'node_modules', '.package-lock.json');
const lock = join(root, 'package-lock.json');
// The lock file changes whenever dependencies do; package.json alone changes for scripts too.
// A node_modules that is a link to another checkout's (a git worktree's, say) belongs to that checkout:
// `npm ci` would empty it under the other checkout's feet.
const linked = existsSync(join(root, 'node_modules')) && lstatSync(join(root, 'node_modules')).isSymbolicLink();
if (linked && mtime(installedMarker) < mtime(lock)) say('node_modules is a link to another checkout: not reinstalling here (run npm ci there if dependencies changed)');
if (!linked && (!existsSync(installedMarker) || mtime(installedMarker) < mtime(lock))) {
  // better-sqlite3 compiles from source here (no prebuilt download), which takes a minute or two.
  run('npm', [existsSync(lock) ? 'ci' : 'install', '--no-audit', '--no-fund'], 'installing dependencies (first run compiles SQLite, about 2 minutes)');
}

// The generated code is committed: this runs only when proto/ (or the generator) changed since.
const stale = staleProtos();
if (stale.length > 0) {
  say(`generating src/rpc/gen/ from proto/ (${stale.map((p) => p.name).join(', ')})`);
  try {
    generate(stale);
  } catch (err) {
    say(err instanceof Error ? err.message : String(err));
    process.exit(1);
  }
}

const stamp = join(root, '.fnts-build-stamp');
const sourcesChanged = Math.max(newestUnder(join(root, 'src')), mtime(join(root, 'tsconfig.json')), mtime(join(root, 'tsconfig.build.json')));
const wantDist = !process.argv.includes('--no-dist');
if (process.argv.includes('--build') || (wantDist && (!existsSync(join(root, 'dist', 'cli', 'main.js')) || mtime(stamp) < sourcesChanged))) {
  run(process.execPath, [join(root, 'node_modules', 'typescript', 'bin', 'tsc'), '-p', 'tsconfig.build.json'], 'compiling TypeScript');
  // tsc takes the generated code's types (.d.ts) and emits nothing for it: its JavaScript goes beside the compiled code as it is.
  cpSync(GEN_DIR, join(root, 'dist', 'rpc', 'gen'), { recursive: true, filter: (src) => !src.endsWith('.d.ts') });
  writeFileSync(stamp, new Date().toISOString() + '\n');
}

// The console (ui/ -> dist/ui/), when its sources or its build script changed since the last build.
const uiBuilt = mtime(join(root, 'dist', 'ui', 'index.html'));
const uiChanged = Math.max(newestUnder(join(root, 'ui')), mtime(join(root, 'scripts', 'build-ui.mjs')), mtime(lock));
if (process.argv.includes('--build') || uiBuilt < uiChanged) {
  run(process.execPath, [join(root, 'scripts', 'build-ui.mjs')], 'building the console');
}
