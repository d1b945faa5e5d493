import { describe, expect, it } from 'vitest';
import { canonical, headerLists, rfc3339, withoutHopHeaders } from './call.js';

describe('withoutHopHeaders', () => {
  it('drops hop-by-hop headers, those Connection names, and the one asked for', () => {
    const raw = ['Host', 'h', 'Connection', 'keep-alive, X-Hop', 'X-Hop', '1', 'Keep-Alive', 'timeout=5', 'Content-Length', '3', 'X-Keep', 'y', 'Transfer-Encoding', 'chunked'];
    expect(withoutHopHeaders(raw)).toEqual(['Content-Length', '3', 'X-Keep', 'y']);
    expect(withoutHopHeaders(raw, 'content-length')).toEqual(['X-Keep', 'y']);
    expect(withoutHopHeaders(['content-type', 'a', 'x-multi', '1', 'X-Multi', '2'])).toEqual(['content-type', 'a', 'x-multi', '1', 'X-Multi', '2']);
  });
});

describe('rfc3339', () => {
  it("formats like Go's time.RFC3339 in UTC, without fractions", () => {
    expect(rfc3339(new Date('2026-11-22T17:13:00.987Z'))).toBe('2026-11-22T17:13:00Z');
    expect(rfc3339(new Date('2026-11-22T17:13:01.001Z'))).toBe('2026-11-22T17:13:01Z');
  });
});

describe('canonical and headerLists', () => {
  it('write header names the way Go and the FDKs do, values grouped by name', () => {
    expect(canonical('x-my-HEADER')).toBe('X-My-Header');
    expect(headerLists(['content-type', 'a', 'X-Multi', '1', 'x-multi', '2'])).toEqual({ 'Content-Type': ['a'], 'X-Multi': ['1', '2'] });
  });
});
