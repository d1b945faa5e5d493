/**
 * Meanings are typed, not spelled: no code decides by comparing an error's
 * words (a message may be reworded, translated or come from another node).
 * Decisions compare the error catalog's codes (ApiError.is, an outcome's
 * `code`), an outcome's `ran`, a cancel's CancelReason.
 */
import { readdirSync, readFileSync } from 'node:fs';
import { dirname, join, relative, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';

const SRC = resolve(dirname(fileURLToPath(import.meta.url)), '..', '..', 'src');

function sources(dir: string): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((e) => {
    const p = join(dir, e.name);
    if (e.isDirectory()) return sources(p);
    return e.name.endsWith('.ts') && !e.name.endsWith('.test.ts') ? [p] : [];
  });
}

/**
 * Comparisons of an error's or outcome's words: `.message ===`, `=== E.X.message`,
 * `.error === '...'`, `.message.includes(` (a check of its type, or that it is empty, is no decision by words).
 */
const SPELLED = [
  /(?<!typeof [\w.]*)\.message\s*[!=]==/,
  /[!=]==\s*E\.\w+\.message\b/,
  /\.error\s*[!=]==\s*(E\.|(['"`])[^'"`])/,
  /\.(message|error)\??\.(includes|startsWith|endsWith)\(/,
  /\.(message|error)\s*\??\.match\(/,
];

describe('decisions', () => {
  it('never compare the words of an error or an outcome', () => {
    const found: string[] = [];
    for (const file of sources(SRC)) {
      readFileSync(file, 'utf8')
        .split('\n')
        .forEach((line, i) => {
          if (SPELLED.some((re) => re.test(line))) found.push(`${relative(SRC, file)}:${i + 1}: ${line.trim()}`);
        });
    }
    expect(found).toEqual([]);
  });
});
