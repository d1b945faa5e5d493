/**
 * Page cursors: the last item's sort key, base64url without padding (as Fn
 * encodes the last name). Multi-part keys are joined with NUL, which no name
 * or id can contain.
 */
import { ApiError, E } from '../models/index.js';

export function encodeCursor(parts: readonly string[]): string {
  return Buffer.from(parts.join('\0'), 'utf8').toString('base64url');
}

export function decodeCursor(cursor: string): string[] {
  // Node's decoder skips junk silently; a cursor we did not make is a client error.
  if (!/^[A-Za-z0-9_-]*$/.test(cursor) || cursor.length % 4 === 1) throw new ApiError(E.InvalidCursor);
  return Buffer.from(cursor, 'base64url').toString('utf8').split('\0');
}
