#!/usr/bin/env node
// `npm test`: type-checks and lints src/, test/ and bench/ (typescript-eslint,
// Prettier: `npm run lint`) while the suite runs (the suite mostly waits on
// Docker, so the checks cost no wall time), and fails if any of them fails;
// then prints the ten slowest tests and test files,
// so the suite's time budget stays in view. Arguments go to vitest
// (`npm test -- test/api`).
import { spawn } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join, relative } from 'node:path';
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

const reportDir = mkdtempSync(join(tmpdir(), 'fnts-test-report-'));
const report = join(reportDir, 'report.json');
const started = Date.now();
const typecheck = Promise.all([run([bin('typescript', 'bin/tsc'), '-p', 'tsconfig.json'], true), run([bin('typescript', 'bin/tsc'), '-p', 'ui/tsconfig.json'], true)]).then(([server, ui]) => ({
  code: server.code || ui.code,
  output: server.output + ui.output,
}));
// After the type check: both are CPU-bound, and the suite needs the rest of the machine.
const FORMATTED = ['src/**/*.ts', 'test/**/*.ts', 'test/**/*.mjs', 'bench/**/*.mts', 'scripts/**/*.mjs', 'ui/**/*.{ts,tsx,css}', 'vitest.config.ts', 'eslint.config.js'];
const lint = typecheck.then(async () => {
  const eslint = await run([bin('eslint', 'bin/eslint.js'), '.'], true);
  const prettier = await run([bin('prettier', 'bin/prettier.cjs'), '--check', ...FORMATTED], true);
  return { code: eslint.code || prettier.code, output: `${eslint.output}${prettier.code !== 0 ? `${prettier.output}(npm run format fixes the formatting)\n` : ''}` };
});
const suite = run([bin('vitest', 'vitest.mjs'), 'run', '--reporter=default', '--reporter=json', `--outputFile.json=${report}`, ...process.argv.slice(2)], false);
const [types, tests] = await Promise.all([typecheck, suite]);
const linted = await lint;
printSlowest(report, Date.now() - started);
rmSync(reportDir, { recursive: true, force: true });
if (types.code !== 0) {
  process.stderr.write(`\nfnts: the type check failed (tsc -p tsconfig.json, tsc -p ui/tsconfig.json); fix these and run npm test again:\n${types.output}\n`);
} else {
  process.stderr.write('fnts: type check passed\n');
}
if (linted.code !== 0) {
  process.stderr.write(`\nfnts: the lint failed (npm run lint: typescript-eslint and Prettier); fix these and run npm test again:\n${linted.output}\n`);
} else {
  process.stderr.write('fnts: lint passed\n');
}
process.exit(types.code || linted.code || tests.code);

/** The ten slowest tests and test files of the run, from vitest's JSON report (nothing when there is none). */
function printSlowest(file, wallMs) {
  let data;
  try {
    data = JSON.parse(readFileSync(file, 'utf8'));
  } catch {
    return;
  }
  const files = (data.testResults ?? []).map((f) => ({ name: relative(root, f.name), ms: (f.endTime ?? 0) - (f.startTime ?? 0), tests: f.assertionResults ?? [] }));
  const tests = files.flatMap((f) => f.tests.map((t) => ({ name: `${f.name} > ${t.fullName ?? t.title}`, ms: t.duration ?? 0 })));
  const line = (x) => `  ${(x.ms / 1000).toFixed(1).padStart(6)} s  ${x.name.length > 150 ? `${x.name.slice(0, 147)}...` : x.name}`;
  const slowest = (list) =>
    [...list]
      .sort((a, b) => b.ms - a.ms)
      .slice(0, 10)
      .map(line)
      .join('\n');
  process.stderr.write(
    `\nfnts: the ten slowest test files:\n${slowest(files)}\nfnts: the ten slowest tests:\n${slowest(tests)}\nfnts: ${data.numTotalTests ?? '?'} tests in ${files.length} files, ${(wallMs / 1000).toFixed(0)} s wall\n`,
  );
}
