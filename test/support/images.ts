/**
 * Real function images for tests and benchmarks, built locally (there is no
 * registry here): a Node base image made from this machine's own `node`
 * binary and the libraries `ldd` lists for it, and function images on top
 * of it that run the official Fn FDK for Node, packaged the way Fn users do.
 */
import { copyFileSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { buildImage as build, digest, docker, imageExists, listFiles, nodeRootfs } from '../../scripts/node-image.mjs';
import { buildRunnerImage } from '../../scripts/runner-image.mjs';

export { docker };

const root = join(dirname(fileURLToPath(import.meta.url)), '..', '..');

export async function dockerReachable(): Promise<boolean> {
  try {
    await docker().ping();
    return true;
  } catch {
    return false;
  }
}

export const NODE_BASE_IMAGE = `fnts-test/node-base:${process.versions.node}`;

/**
 * An image holding only this machine's `node`, its libraries, /tmp and a
 * passwd with uid 1000 ("fn"): the smallest thing the Node FDK runs on.
 */
export async function ensureNodeBaseImage(): Promise<string> {
  if (await imageExists(NODE_BASE_IMAGE)) return NODE_BASE_IMAGE;
  const ctx = mkdtempSync(join(tmpdir(), 'fnts-base-'));
  try {
    writeFileSync(join(ctx, 'Dockerfile'), [...nodeRootfs(join(ctx, 'rootfs')), ''].join('\n'));
    await build(ctx, NODE_BASE_IMAGE);
  } finally {
    rmSync(ctx, { recursive: true, force: true });
  }
  return NODE_BASE_IMAGE;
}

/**
 * The fnts image (npm run image:runner) of this checkout's dist/, built
 * unless it is up to date; its tag names its content. The global setup has
 * compiled dist/ already.
 */
export function ensureRunnerImage(): Promise<string> {
  return buildRunnerImage(() => undefined);
}

const FDK_DIR = join(root, 'node_modules', '@fnproject', 'fdk');

/**
 * Builds a Node function image the way Fn users package one: `func.js` using
 * the official FDK (`require('@fnproject/fdk')`), entrypoint `node func.js`.
 * Returns the image tag, which changes whenever the source does.
 */
export async function ensureFunctionImage(name: string, funcJs: string, extraFiles: Record<string, string> = {}, entrypoint: readonly string[] = ['node', 'func.js']): Promise<string> {
  const base = await ensureNodeBaseImage();
  const fdkFiles = listFiles(FDK_DIR).sort();
  const tag = `fnts-test/${name}:${digest([base, funcJs, JSON.stringify(extraFiles), JSON.stringify(entrypoint), ...fdkFiles.map((f) => readFileSync(join(FDK_DIR, f)))])}`;
  if (await imageExists(tag)) return tag;
  const ctx = mkdtempSync(join(tmpdir(), `fnts-fn-${name}-`));
  try {
    for (const f of fdkFiles) {
      const target = join(ctx, 'node_modules', '@fnproject', 'fdk', f);
      mkdirSync(dirname(target), { recursive: true });
      copyFileSync(join(FDK_DIR, f), target);
    }
    writeFileSync(join(ctx, 'func.js'), funcJs);
    writeFileSync(join(ctx, 'package.json'), JSON.stringify({ name, version: '1.0.0', main: 'func.js', dependencies: { '@fnproject/fdk': '*' } }));
    for (const [file, content] of Object.entries(extraFiles)) {
      mkdirSync(dirname(join(ctx, file)), { recursive: true });
      writeFileSync(join(ctx, file), content);
    }
    writeFileSync(join(ctx, 'Dockerfile'), [`FROM ${base}`, 'WORKDIR /function', 'COPY . /function/', `ENTRYPOINT ${JSON.stringify(entrypoint)}`, ''].join('\n'));
    await build(ctx, tag);
  } finally {
    rmSync(ctx, { recursive: true, force: true });
  }
  return tag;
}

/** The FDK's hello-world function, as `fn init --runtime node` generates it. */
export const HELLO_FUNC_JS = `const fdk = require('@fnproject/fdk');

fdk.handle(function (input) {
  let name = 'World';
  if (input.name) {
    name = input.name;
  }
  console.log('\\nInside Node Hello World function');
  return { message: 'Hello ' + name };
});
`;
