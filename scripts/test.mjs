#!/usr/bin/env node
// `npm test`: type-checks src/, test/ and bench/ while the suite runs (the
// suite mostly waits on Docker, so the type check costs no wall time), and
// fails if either fails. Arguments go to vitest (`npm test -- test/api`).
import { spawn } from 'node:child_process';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const root = join(dirname(fileURLToPath(import.meta.url)), '..');
const bin = (pkg, file) => join(root, 'node_modules', pkg, file);

function run(args, capture) {
  return new Promise((resolve) => {
    const child = spawn(process.execPath, args, { cwd: root, stdio: ['ignore', capture ? 'pipe' : 'inherit', capture ? 'pipe' : 'inherit'] });
    let output = '';
    child.stdout?.on('data', (c) => (output += c));
    child.stderr?.on('data', (c) => (output += c));
    child.on('exit', (code, signal) => resolve({ code: code ?? (signal ? 1 : 0), output }));
  });
}

const typecheck = run([bin('typescript', 'bin/tsc'), '-p', 'tsconfig.json'], true);
const suite = run([bin('vitest', 'vitest.mjs'), 'run', ...process.argv.slice(2)], false);
const [types, tests] = await Promise.all([typecheck, suite]);
if (types.code !== 0) {
  process.stderr.write(`\nfnts: the type check failed (tsc -p tsconfig.json); fix these and run npm test again:\n${types.output}\n`);
} else {
  process.stderr.write('fnts: type check passed\n');
}
process.exit(types.code !== 0 ? types.code : tests.code);
