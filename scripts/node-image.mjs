// Images made from this machine's own `node` (there is no registry here):
// a root file system holding the node binary and the libraries `ldd` lists
// for it, built into an image FROM scratch. The test images
// (test/support/images.ts) and the fnts image (scripts/runner-image.mjs)
// both start from it. Plain JavaScript: `npm run image:runner` runs it
// without a build step.
import { execFileSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { copyFileSync, mkdirSync, readdirSync, writeFileSync } from 'node:fs';
import { dirname, join, relative } from 'node:path';
import Docker from 'dockerode';

export function docker() {
  return new Docker({ socketPath: process.env['DOCKER_SOCKET'] ?? '/var/run/docker.sock' });
}

export async function imageExists(tag) {
  try {
    await docker().getImage(tag).inspect();
    return true;
  } catch {
    return false;
  }
}

/** Every file under `dir`, as paths relative to `base`. */
export function listFiles(dir, base = dir) {
  return readdirSync(dir, { withFileTypes: true }).flatMap((e) => (e.isDirectory() ? listFiles(join(dir, e.name), base) : [relative(base, join(dir, e.name))]));
}

/** Builds `context` (a folder with a Dockerfile) as `tags` (the first is built, the rest tagged), failing with the build log's error. */
export async function buildImage(context, tags) {
  const [tag, ...more] = Array.isArray(tags) ? tags : [tags];
  const d = docker();
  const stream = await d.buildImage({ context, src: listFiles(context) }, { t: tag, rm: true, forcerm: true });
  await new Promise((resolve, reject) => {
    d.modem.followProgress(
      stream,
      (err, output) => {
        const failed = output?.find((o) => o.error);
        if (err || failed) reject(new Error(`docker build ${tag} failed: ${err?.message ?? failed?.error}`));
        else resolve();
      },
      () => {},
    );
  });
  for (const t of more) {
    const at = t.lastIndexOf(':');
    await d.getImage(tag).tag({ repo: t.slice(0, at), tag: t.slice(at + 1) });
  }
}

/** A content hash of `parts`, so an image is rebuilt only when its inputs change. */
export function digest(parts) {
  const h = createHash('sha256');
  for (const p of parts) h.update(p).update('\0');
  return h.digest('hex').slice(0, 12);
}

/** The libraries the dynamic loader needs for `binary`, as absolute paths. */
export function sharedLibraries(binary) {
  const out = execFileSync('ldd', [binary], { encoding: 'utf8' });
  return [...out.matchAll(/(\/\S+)/g)].map((m) => m[1]).filter((p) => p !== binary);
}

/** Copies `files` into `rootfs` at their own absolute paths, links followed (the image gets real files). */
export function copyIntoRootfs(rootfs, files) {
  for (const file of files) {
    const target = join(rootfs, file);
    mkdirSync(dirname(target), { recursive: true });
    copyFileSync(file, target);
  }
}

/**
 * Fills `rootfs` with this machine's `node`, its libraries, /tmp and a
 * passwd with root and uid 1000 ("fn"); answers with the Dockerfile lines
 * that make an image of it (PATH set, node the entrypoint).
 */
export function nodeRootfs(rootfs) {
  copyIntoRootfs(rootfs, [process.execPath, ...sharedLibraries(process.execPath)]);
  mkdirSync(join(rootfs, 'tmp'), { recursive: true });
  mkdirSync(join(rootfs, 'etc'), { recursive: true });
  writeFileSync(join(rootfs, 'etc', 'passwd'), 'root:x:0:0:root:/root:/sbin/nologin\nfn:x:1000:1000:fn:/tmp:/sbin/nologin\n');
  writeFileSync(join(rootfs, 'etc', 'group'), 'root:x:0:\nfn:x:1000:\n');
  const node = relative('/', process.execPath);
  return ['FROM scratch', 'COPY rootfs/ /', `ENV PATH=/${dirname(node)}:/usr/local/bin:/usr/bin:/bin`, `ENTRYPOINT ["/${node}"]`];
}
