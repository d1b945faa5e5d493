/**
 * The docs hold together: every relative link in README.md, bench/README.md
 * and docs/*.md, and every docs/ anchor a comment in src/ cites, names a
 * file that exists and (for Markdown) a heading that does (GitHub's slugs).
 */
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { dirname, join, normalize, relative, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';

const ROOT = resolve(dirname(fileURLToPath(import.meta.url)), '..', '..');

/** Lines outside fenced code blocks, numbered. */
function prose(file: string): Array<[number, string]> {
  let fence = false;
  const out: Array<[number, string]> = [];
  readFileSync(file, 'utf8')
    .split('\n')
    .forEach((line, i) => {
      if (line.startsWith('```')) fence = !fence;
      else if (!fence) out.push([i + 1, line]);
    });
  return out;
}

/** GitHub's anchor for a heading: lower case, punctuation dropped, spaces as dashes, repeats numbered. */
function anchors(file: string): Set<string> {
  const seen = new Map<string, number>();
  const out = new Set<string>();
  for (const [, line] of prose(file)) {
    const m = /^#{1,6}\s+(.*?)\s*#*\s*$/.exec(line);
    if (!m) continue;
    const slug = m[1]!
      .trim()
      .toLowerCase()
      .replace(/[^\w\- ]/g, '')
      .replace(/ /g, '-');
    const n = seen.get(slug) ?? 0;
    seen.set(slug, n + 1);
    out.add(n === 0 ? slug : `${slug}-${n}`);
  }
  return out;
}

function tree(dir: string, ending: string): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((e) => (e.isDirectory() ? tree(join(dir, e.name), ending) : e.name.endsWith(ending) ? [join(dir, e.name)] : []));
}

describe('the docs', () => {
  it('link only to files and headings that exist', () => {
    const broken: string[] = [];
    const check = (from: string, target: string, where: string): void => {
      const [path, frag] = target.split('#') as [string, string | undefined];
      const full = path ? normalize(join(dirname(from), path)) : from;
      if (!existsSync(full)) broken.push(`${where}: no file ${target}`);
      else if (frag && full.endsWith('.md') && !anchors(full).has(frag)) broken.push(`${where}: no heading #${frag} in ${relative(ROOT, full)}`);
    };
    const markdown = [join(ROOT, 'README.md'), join(ROOT, 'bench', 'README.md'), ...tree(join(ROOT, 'docs'), '.md')];
    for (const file of markdown) {
      for (const [n, line] of prose(file)) {
        for (const m of line.replace(/`[^`]*`/g, '').matchAll(/\]\(([^)\s]+)\)/g)) {
          if (!/^[a-z]+:/.test(m[1]!)) check(file, m[1]!, `${relative(ROOT, file)}:${n}`);
        }
      }
    }
    for (const file of tree(join(ROOT, 'src'), '.ts')) {
      readFileSync(file, 'utf8')
        .split('\n')
        .forEach((line, i) => {
          for (const m of line.matchAll(/((?:docs\/[\w.-]+\.md|bench\/README\.md)(?:#[\w-]+)?)/g)) check(join(ROOT, 'x'), m[1]!, `${relative(ROOT, file)}:${i + 1}`);
        });
    }
    expect(broken).toEqual([]);
  });
});
