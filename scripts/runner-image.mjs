#!/usr/bin/env node
// `npm run image:runner`: builds the fnts image offline, from this
// checkout: this machine's node and its libraries (scripts/node-image.mjs),
// dist/, proto/ and the production node_modules (no dev dependencies, no
// sources, docs or maps), and the libraries native modules link to. The
// same image serves every role (FN_NODE_TYPE); the pool manager's runners
// are pure runners of it. Tagged fnts/fnts:<content digest>, :<version>
// and :latest; a build whose inputs have not changed is skipped.
import { spawnSync } from 'node:child_process';
import { cpSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { basename, dirname, join, relative, sep } from 'node:path';
import { fileURLToPath } from 'node:url';
import { buildImage, copyIntoRootfs, digest, docker, imageExists, listFiles, nodeRootfs, sharedLibraries } from './node-image.mjs';

const root = join(dirname(fileURLToPath(import.meta.url)), '..');
export const RUNNER_IMAGE_REPO = 'fnts/fnts';

/** What a production install needs of each package: not its sources, tests, docs, maps or type declarations. */
function wanted(path) {
  const name = basename(path);
  if (/\.(md|markdown|map|ts|mts|cts|tsbuildinfo)$/i.test(name) && !name.endsWith('.node')) return false;
  const parts = path.split(sep);
  // better-sqlite3 keeps SQLite's sources (deps/, src/) and the build's objects beside the one .node it loads.
  const at = parts.lastIndexOf('better-sqlite3');
  if (at >= 0 && ['deps', 'src'].includes(parts[at + 1] ?? '')) return false;
  if (at >= 0 && parts[at + 1] === 'build' && parts.length > at + 2 && !(parts[at + 2] === 'Release' && (parts.length === at + 3 || name.endsWith('.node')))) return false;
  return !parts.some((p) => p === 'test' || p === 'tests' || p === '__tests__' || p === 'docs' || p === 'example' || p === 'examples');
}

/** The production packages' folders, as npm resolves them from node_modules (no registry). */
function productionPackages() {
  const ls = spawnSync('npm', ['ls', '--omit=dev', '--all', '--parseable'], { cwd: root, encoding: 'utf8' });
  if (ls.status !== 0 && !ls.stdout) throw new Error(`npm ls failed: ${ls.stderr}; run npm ci in the checkout whose node_modules this is`);
  const dirs = ls.stdout.split('\n').filter((d) => d && d !== root);
  // A package nested in another's node_modules is copied with its parent.
  return dirs.filter((d) => !dirs.some((p) => p !== d && d.startsWith(p + sep)));
}

/** Builds of this image kept at least this long after they were made (a test or a manager may still use one). */
const KEEP_BUILDS_MS = 60 * 60_000;

/**
 * Untags earlier builds (fnts/fnts:<digest>, more than an hour old), so that
 * rebuilding as the sources change does not pile up images; one still used
 * by a container stays (the engine refuses), as do :latest and :<version>.
 */
async function pruneOldBuilds(keep, say) {
  const old = [];
  for (const image of await docker().listImages({ filters: { reference: [RUNNER_IMAGE_REPO] } })) {
    if (Date.now() - image.Created * 1000 < KEEP_BUILDS_MS) continue;
    for (const t of image.RepoTags ?? []) if (t !== keep && /:[0-9a-f]{12}$/.test(t)) old.push(t);
  }
  let removed = 0;
  for (const t of old) {
    try {
      await docker().getImage(t).remove();
      removed++;
    } catch {
      // in use by a container, or gone already
    }
  }
  if (removed > 0) say(`removed ${removed} earlier build(s) of ${RUNNER_IMAGE_REPO}`);
}

/**
 * Builds the image unless one with the same inputs exists; answers with its
 * digest tag. `say` gets a line per step.
 */
export async function buildRunnerImage(say = (line) => process.stdout.write(`${line}\n`)) {
  const version = JSON.parse(readFileSync(join(root, 'package.json'), 'utf8')).version;
  const dist = listFiles(join(root, 'dist'))
    .filter((f) => !f.endsWith('.map'))
    .sort();
  const packages = productionPackages();
  const tag = `${RUNNER_IMAGE_REPO}:${digest([process.version, readFileSync(join(root, 'package-lock.json')), readFileSync(fileURLToPath(import.meta.url)), ...dist.flatMap((f) => [f, readFileSync(join(root, 'dist', f))]), ...packages])}`;
  if (await imageExists(tag)) {
    say(`image ${tag} is up to date`);
    return tag;
  }
  const ctx = mkdtempSync(join(tmpdir(), 'fnts-image-'));
  try {
    const started = Date.now();
    const rootfs = join(ctx, 'rootfs');
    say(`node ${process.version} and its libraries`);
    const lines = nodeRootfs(rootfs);
    const app = join(rootfs, 'app');
    say(`dist/ (${dist.length} files), proto/, package.json`);
    cpSync(join(root, 'dist'), join(app, 'dist'), { recursive: true, filter: (p) => !p.endsWith('.map') });
    cpSync(join(root, 'proto'), join(app, 'proto'), { recursive: true });
    cpSync(join(root, 'package.json'), join(app, 'package.json'));
    say(`${packages.length} production packages from node_modules`);
    for (const dir of packages) cpSync(dir, join(app, relative(root, dir)), { recursive: true, dereference: true, filter: wanted });
    const natives = listFiles(app).filter((f) => f.endsWith('.node'));
    const libraries = [...new Set(natives.flatMap((f) => sharedLibraries(join(app, f))))];
    say(`${natives.length} native module(s), ${libraries.length} libraries they link to`);
    copyIntoRootfs(rootfs, libraries);
    writeFileSync(
      join(ctx, 'Dockerfile'),
      [
        ...lines,
        'WORKDIR /app',
        'ENV NODE_ENV=production FN_LOG_FORMAT=json',
        'EXPOSE 8080 9190 9191',
        `LABEL org.opencontainers.image.title=fnts org.opencontainers.image.version=${version}`,
        'ENTRYPOINT ["/' + relative('/', process.execPath) + '", "/app/dist/cli/main.js"]',
        'CMD ["serve"]',
        '',
      ].join('\n'),
    );
    say(`building ${tag}`);
    await buildImage(ctx, [tag, `${RUNNER_IMAGE_REPO}:${version}`, `${RUNNER_IMAGE_REPO}:latest`]);
    say(`built ${tag} (also :${version} and :latest) in ${((Date.now() - started) / 1000).toFixed(1)}s`);
    await pruneOldBuilds(tag, say);
  } finally {
    rmSync(ctx, { recursive: true, force: true });
  }
  return tag;
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  try {
    await buildRunnerImage();
  } catch (err) {
    process.stderr.write(`fnts: building the image failed: ${err instanceof Error ? err.message : String(err)}\n`);
    process.exit(1);
  }
}
