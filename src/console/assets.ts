/**
 * The console's page and assets, served at /ui from what the build wrote to
 * dist/ui/ (scripts/build-ui.mjs): `index.html`, and `assets/<name>.<hash>.<ext>`
 * with a gzip and a brotli copy of each made at build time.
 *
 * A small handler instead of @fastify/static: the files are few, known at
 * build time and small, so each is read once and kept in memory with its
 * compressed copies; the handler picks the copy the client accepts and sets
 * the caching and security headers itself (no compression plugin, no
 * directory listing, no path from the URL ever reaches the file system).
 *
 * Hashed assets never change under their name: cached for a year,
 * immutable. The page is revalidated on every load (no-cache, with an ETag),
 * so a new version of fnts is picked up at once. The page allows scripts,
 * styles, images and connections from its own origin only (CSP), cannot be
 * framed, and sends no Referer.
 */
import { createHash } from 'node:crypto';
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { extname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import { ApiError, E } from '../models/index.js';

/** Where the build puts the console: dist/ui/ beside dist/console/ (and two levels up from src/console/ as from dist/console/). */
export const UI_DIR = fileURLToPath(new URL('../../dist/ui/', import.meta.url));

const TYPES: Readonly<Record<string, string>> = {
  '.html': 'text/html; charset=utf-8',
  '.js': 'text/javascript; charset=utf-8',
  '.css': 'text/css; charset=utf-8',
  '.svg': 'image/svg+xml',
  '.png': 'image/png',
  '.map': 'application/json; charset=utf-8',
};

export const SECURITY_HEADERS: Readonly<Record<string, string>> = {
  'Content-Security-Policy':
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; font-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'",
  'X-Content-Type-Options': 'nosniff',
  'X-Frame-Options': 'DENY',
  'Referrer-Policy': 'no-referrer',
  'Cross-Origin-Opener-Policy': 'same-origin',
  'Cross-Origin-Resource-Policy': 'same-origin',
};

interface Asset {
  readonly type: string;
  readonly etag: string;
  readonly plain: Buffer;
  readonly gzip: Buffer | undefined;
  readonly br: Buffer | undefined;
}

function readAsset(path: string): Asset {
  const plain = readFileSync(path);
  const copy = (ext: string): Buffer | undefined => (existsSync(path + ext) ? readFileSync(path + ext) : undefined);
  return {
    type: TYPES[extname(path)] ?? 'application/octet-stream',
    etag: `"${createHash('sha256').update(plain).digest('base64url').slice(0, 22)}"`,
    plain,
    gzip: copy('.gz'),
    br: copy('.br'),
  };
}

/** The page and its assets by URL path; empty when the console was not built. Read once, at the first request. */
function loadAssets(dir: string): Map<string, Asset> {
  const assets = new Map<string, Asset>();
  if (!existsSync(join(dir, 'index.html'))) return assets;
  assets.set('/ui', readAsset(join(dir, 'index.html')));
  const assetDir = join(dir, 'assets');
  if (existsSync(assetDir)) {
    for (const name of readdirSync(assetDir)) {
      if (name.endsWith('.gz') || name.endsWith('.br')) continue;
      assets.set(`/ui/assets/${name}`, readAsset(join(assetDir, name)));
    }
  }
  return assets;
}

/** The encoding to send: brotli, then gzip, when the client takes it and a copy exists. */
function encodingFor(req: FastifyRequest, asset: Asset): 'br' | 'gzip' | undefined {
  const accept = String(req.headers['accept-encoding'] ?? '');
  if (asset.br && /\bbr\b/.test(accept)) return 'br';
  if (asset.gzip && /\bgzip\b/.test(accept)) return 'gzip';
  return undefined;
}

function send(req: FastifyRequest, reply: FastifyReply, asset: Asset, immutable: boolean): FastifyReply {
  reply.headers(SECURITY_HEADERS);
  reply.header('Cache-Control', immutable ? 'public, max-age=31536000, immutable' : 'no-cache');
  reply.header('ETag', asset.etag);
  reply.header('Vary', 'Accept-Encoding');
  reply.type(asset.type);
  if (req.headers['if-none-match'] === asset.etag) return reply.code(304).send();
  const encoding = encodingFor(req, asset);
  if (encoding) reply.header('Content-Encoding', encoding);
  return reply.send(encoding === 'br' ? asset.br : encoding === 'gzip' ? asset.gzip : asset.plain);
}

/**
 * Serves the console at /ui (the page for /ui and /ui/, the assets under
 * /ui/assets/), and at /ui/settings.json what the page needs before its
 * first API request: whether the API asks for a token (so a page without
 * one shows the login rather than collect a 401 first).
 */
export function registerUi(app: FastifyInstance, settings: { readonly auth: boolean }, dir: string = UI_DIR): void {
  let assets: Map<string, Asset> | undefined;
  const find = (path: string): Asset | undefined => (assets ??= loadAssets(dir)).get(path);

  app.get('/ui', async (req, reply) => {
    const page = find('/ui');
    if (!page) throw new ApiError(E.PathNotFound, { message: 'The console was not built: run `npm run build` (or `node scripts/prepare.mjs`) and restart fnts' });
    return send(req, reply, page, false);
  });
  app.get('/ui/settings.json', async (_req, reply) => reply.headers(SECURITY_HEADERS).header('Cache-Control', 'no-store').send({ auth: settings.auth }));
  app.get('/ui/assets/:name', async (req, reply) => {
    const asset = find(`/ui/assets/${(req.params as { name: string }).name}`);
    if (!asset) throw new ApiError(E.PathNotFound);
    return send(req, reply, asset, true);
  });
}

/** Whether a request for / comes from a browser (it asks for HTML first): such a request is sent to the console. */
export function wantsHtml(req: FastifyRequest): boolean {
  const accept = String(req.headers.accept ?? '');
  return /^\s*text\/html\b/i.test(accept);
}
