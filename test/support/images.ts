/**
 * Real function images for tests and benchmarks, built locally (there is no
 * registry here): a Node base image made from this machine's own `node`
 * binary and the libraries `ldd` lists for it, and function images on top
 * of it that run the official Fn FDK for Node, packaged the way Fn users do.
 */
import { execFileSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { copyFileSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join, relative } from 'node:path';
import { fileURLToPath } from 'node:url';
import Docker from 'dockerode';

const root = join(dirname(fileURLToPath(import.meta.url)), '..', '..');

export function docker(): Docker {
  return new Docker({ socketPath: process.env['DOCKER_SOCKET'] ?? '/var/run/docker.sock' });
}

export async function dockerReachable(): Promise<boolean> {
  try {
    await docker().ping();
    return true;
  } catch {
    return false;
  }
}

async function imageExists(tag: string): Promise<boolean> {
  try {
    await docker().getImage(tag).inspect();
    return true;
  } catch {
    return false;
  }
}

function listFiles(dir: string, base = dir): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((e) =>
    e.isDirectory() ? listFiles(join(dir, e.name), base) : [relative(base, join(dir, e.name))],
  );
}

/** Builds `context` (a folder with a Dockerfile) as `tag`, failing with the build log's error. */
async function build(context: string, tag: string): Promise<void> {
  const d = docker();
  const stream = await d.buildImage({ context, src: listFiles(context) }, { t: tag, rm: true, forcerm: true });
  await new Promise<void>((resolve, reject) => {
    d.modem.followProgress(
      stream,
      (err, output) => {
        const failed = (output as Array<{ error?: string }> | undefined)?.find((o) => o.error);
        if (err || failed) reject(new Error(`docker build ${tag} failed: ${err?.message ?? failed?.error}`));
        else resolve();
      },
      () => {},
    );
  });
}

/** A content hash of files, so an image is rebuilt only when its inputs change. */
function digest(parts: Array<string | Buffer>): string {
  const h = createHash('sha256');
  for (const p of parts) h.update(p).update('\0');
  return h.digest('hex').slice(0, 12);
}

/** The libraries the dynamic loader needs for `binary`, as absolute paths. */
function sharedLibraries(binary: string): string[] {
  const out = execFileSync('ldd', [binary], { encoding: 'utf8' });
  return [...out.matchAll(/(\/\S+)/g)].map((m) => m[1]!).filter((p) => p !== binary);
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
    const rootfs = join(ctx, 'rootfs');
    for (const file of [process.execPath, ...sharedLibraries(process.execPath)]) {
      const target = join(rootfs, file);
      mkdirSync(dirname(target), { recursive: true });
      copyFileSync(file, target); // follows symlinks: the image gets real files
    }
    mkdirSync(join(rootfs, 'tmp'), { recursive: true });
    mkdirSync(join(rootfs, 'etc'), { recursive: true });
    writeFileSync(join(rootfs, 'etc', 'passwd'), 'root:x:0:0:root:/root:/sbin/nologin\nfn:x:1000:1000:fn:/tmp:/sbin/nologin\n');
    writeFileSync(join(rootfs, 'etc', 'group'), 'root:x:0:\nfn:x:1000:\n');
    const node = relative('/', process.execPath);
    writeFileSync(
      join(ctx, 'Dockerfile'),
      ['FROM scratch', 'COPY rootfs/ /', `ENV PATH=/${dirname(node)}:/usr/local/bin:/usr/bin:/bin`, `ENTRYPOINT ["/${node}"]`, ''].join('\n'),
    );
    await build(ctx, NODE_BASE_IMAGE);
  } finally {
    rmSync(ctx, { recursive: true, force: true });
  }
  return NODE_BASE_IMAGE;
}

const FDK_DIR = join(root, 'node_modules', '@fnproject', 'fdk');

/**
 * Builds a Node function image the way Fn users package one: `func.js` using
 * the official FDK (`require('@fnproject/fdk')`), entrypoint `node func.js`.
 * Returns the image tag, which changes whenever the source does.
 */
export async function ensureFunctionImage(
  name: string,
  funcJs: string,
  extraFiles: Record<string, string> = {},
  entrypoint: readonly string[] = ['node', 'func.js'],
): Promise<string> {
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
