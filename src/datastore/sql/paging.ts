/** One page of a listing from rows fetched with limitOf(): the page, and a cursor when more rows follow. */
import { encodeCursor, type CursorListing } from '../cursor.js';
import type { Page, PageRequest } from '../datastore.js';

export function toPage<R, T>(rows: R[], perPage: number, map: (r: R) => T, listing: CursorListing, cursorOf: (r: R) => string[]): Page<T> {
  const more = rows.length > perPage;
  const items = (more ? rows.slice(0, perPage) : rows).map(map);
  const last = rows[perPage - 1];
  return more && last !== undefined ? { items, nextCursor: encodeCursor(listing, cursorOf(last)) } : { items };
}

export function limitOf(page: PageRequest): number {
  return Math.min(Math.max(Math.trunc(page.perPage), 1), 100) + 1;
}
