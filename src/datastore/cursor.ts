/**
 * Page cursors: the last item's sort key, base64url without padding (as Fn
 * encodes the last name), made verifiable so that a cursor fnts did not hand
 * out is refused rather than answered with some arbitrary page:
 *
 *   base64url( version(1) | listing(1) | key | check(4) )
 *
 * `key` is the sort key's parts joined with NUL (which no name or id can
 * contain); `listing` names what was listed (a cursor of apps is no cursor of
 * fns); `check` is the first bytes of a SHA-256 over what precedes it. The
 * check guards against junk and edits, not against forgery: a forged cursor
 * can only name a place in a listing its sender may read anyway.
 */
import { createHash } from 'node:crypto';
import { ApiError, E } from '../models/index.js';

/** What a cursor pages through. */
export type CursorListing = 'apps' | 'fns' | 'triggers' | 'calls';

const VERSION = 1;
const LISTING_BYTE: Readonly<Record<CursorListing, number>> = { apps: 0x61, fns: 0x66, triggers: 0x74, calls: 0x63 };
const CHECK_BYTES = 4;

function check(bytes: Buffer): Buffer {
  return createHash('sha256').update(bytes).digest().subarray(0, CHECK_BYTES);
}

export function encodeCursor(listing: CursorListing, parts: readonly string[]): string {
  const body = Buffer.concat([Buffer.from([VERSION, LISTING_BYTE[listing]]), Buffer.from(parts.join('\0'), 'utf8')]);
  return Buffer.concat([body, check(body)]).toString('base64url');
}

/** The sort key of a cursor `encodeCursor(listing, ...)` made; anything else throws `InvalidCursor`. */
export function decodeCursor(listing: CursorListing, cursor: string): string[] {
  // Node's decoder skips junk silently, hence the alphabet check first.
  if (!/^[A-Za-z0-9_-]+$/.test(cursor)) throw new ApiError(E.InvalidCursor);
  const bytes = Buffer.from(cursor, 'base64url');
  if (bytes.length < 2 + CHECK_BYTES || bytes.toString('base64url') !== cursor) throw new ApiError(E.InvalidCursor);
  const body = bytes.subarray(0, bytes.length - CHECK_BYTES);
  if (body[0] !== VERSION || body[1] !== LISTING_BYTE[listing] || !check(body).equals(bytes.subarray(body.length))) {
    throw new ApiError(E.InvalidCursor);
  }
  return body.subarray(2).toString('utf8').split('\0');
}
