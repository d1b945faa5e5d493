#!/usr/bin/env node
// Builds the console (ui/) into dist/ui/: one script and one stylesheet,
// bundled and minified by esbuild, named by their content's hash (served
// as immutable), an index.html naming them, and a gzip and a brotli copy of
// each made here so the server never compresses at run time. Run by
// scripts/prepare.mjs when ui/ changed; nothing is fetched at run time.
import { build } from 'esbuild';
import { createHash } from 'node:crypto';
import { mkdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { brotliCompressSync, constants, gzipSync } from 'node:zlib';

const root = join(dirname(fileURLToPath(import.meta.url)), '..');
const out = join(root, 'dist', 'ui');

const result = await build({
  entryPoints: [join(root, 'ui', 'main.tsx')],
  bundle: true,
  minify: true,
  format: 'esm',
  target: ['es2022'],
  jsx: 'automatic',
  jsxImportSource: 'preact',
  write: false,
  legalComments: 'none',
  logLevel: 'warning',
});
const js = result.outputFiles[0].contents;
const css = readFileSync(join(root, 'ui', 'style.css'));
const cssMin = (await build({ stdin: { contents: css.toString(), loader: 'css' }, minify: true, write: false, logLevel: 'warning' })).outputFiles[0].contents;

const hashed = (name, ext, bytes) => `${name}.${createHash('sha256').update(bytes).digest('hex').slice(0, 12)}.${ext}`;
const jsName = hashed('console', 'js', js);
const cssName = hashed('console', 'css', cssMin);
const html = `<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta name="color-scheme" content="light dark">
<title>fnts console</title>
<link rel="icon" href="data:,">
<link rel="stylesheet" href="/ui/assets/${cssName}">
<script type="module" src="/ui/assets/${jsName}"></script>
</head>
<body>
<div id="console"></div>
<noscript>The console needs JavaScript. Everything it shows is in the API: /v2/apps, /v2/console/summary, /metrics.</noscript>
</body>
</html>
`;

rmSync(out, { recursive: true, force: true });
mkdirSync(join(out, 'assets'), { recursive: true });
const write = (path, bytes) => {
  writeFileSync(path, bytes);
  writeFileSync(`${path}.gz`, gzipSync(bytes, { level: 9 }));
  writeFileSync(`${path}.br`, brotliCompressSync(bytes, { params: { [constants.BROTLI_PARAM_QUALITY]: 11 } }));
};
write(join(out, 'index.html'), Buffer.from(html));
write(join(out, 'assets', jsName), js);
write(join(out, 'assets', cssName), cssMin);
const gz = (b) => gzipSync(b, { level: 9 }).length;
process.stderr.write(`fnts: console built: ${jsName} ${js.length} B (${gz(js)} B gzip), ${cssName} ${cssMin.length} B (${gz(cssMin)} B gzip)\n`);
