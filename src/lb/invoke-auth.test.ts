import { describe, expect, it } from 'vitest';
import { newToken } from '../auth/index.js';
import { RemoteInvokeGuard } from './invoke-auth.js';

describe("the LB's invoke guard", () => {
  it('tells a token of fnts (kept from functions) from a function’s own Authorization, at once and asking nobody', () => {
    // An API URL nothing answers at: carriesToken must not ask it.
    const guard = new RemoteInvokeGuard('http://127.0.0.1:1', undefined);
    expect(guard.carriesToken(`Bearer ${newToken().token}`)).toBe(true);
    expect(guard.carriesToken(`BEARER   ${newToken().token}`)).toBe(true);
    expect(guard.carriesToken('Basic YTpi')).toBe(false);
    expect(guard.carriesToken('Bearer eyJhbGciOiJIUzI1NiJ9.e30.sig')).toBe(false);
    expect(guard.carriesToken('Bearer fnts_short')).toBe(false);
  });
});
