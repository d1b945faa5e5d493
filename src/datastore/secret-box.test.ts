import { randomBytes } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { SEAL_OVERHEAD, SecretBox, UnsealError } from './secret-box.js';

const key = randomBytes(32);
const box = new SecretBox(key);
const value = Buffer.from('hunter2: the database password');

describe('SecretBox', () => {
  it('opens what it sealed, for the same place', () => {
    const sealed = box.seal(value, 'app\0A1\0DB_PASSWORD');
    expect(sealed.length).toBe(value.length + SEAL_OVERHEAD);
    expect(box.open(sealed, 'app\0A1\0DB_PASSWORD')).toEqual(value);
    expect(new SecretBox(Buffer.from(key)).open(sealed, 'app\0A1\0DB_PASSWORD')).toEqual(value);
  });

  it('never holds the value in clear, and seals the same value differently each time', () => {
    const a = box.seal(value, 'x');
    const b = box.seal(value, 'x');
    expect(a.includes(value)).toBe(false);
    expect(a.equals(b)).toBe(false);
    expect(box.open(a, 'x')).toEqual(box.open(b, 'x'));
  });

  it('seals empty and large values', () => {
    expect(box.open(box.seal(Buffer.alloc(0), 'e'), 'e')).toEqual(Buffer.alloc(0));
    const big = randomBytes(64 * 1024);
    expect(box.open(box.seal(big, 'b'), 'b')).toEqual(big);
  });

  it('does not open under another key', () => {
    const sealed = box.seal(value, 'x');
    expect(() => new SecretBox(randomBytes(32)).open(sealed, 'x')).toThrow(UnsealError);
  });

  it('does not open when any byte was altered', () => {
    const sealed = box.seal(value, 'x');
    for (const at of [0, 1, 12, 13, sealed.length - 17, sealed.length - 1]) {
      const altered = Buffer.from(sealed);
      altered[at]! ^= 0x01;
      expect(() => box.open(altered, 'x'), `byte ${at}`).toThrow(UnsealError);
    }
    expect(() => box.open(sealed.subarray(0, sealed.length - 1), 'x')).toThrow(UnsealError);
    expect(() => box.open(Buffer.alloc(5), 'x')).toThrow(UnsealError);
  });

  it('does not open for another place (a value moved to another row)', () => {
    const sealed = box.seal(value, 'app\0A1\0DB_PASSWORD');
    expect(() => box.open(sealed, 'app\0A2\0DB_PASSWORD')).toThrow(UnsealError);
    expect(() => box.open(sealed, 'fn\0A1\0DB_PASSWORD')).toThrow(UnsealError);
    expect(() => box.open(sealed, 'app\0A1\0API_TOKEN')).toThrow(UnsealError);
  });

  it('has a key id that tells keys apart and shows nothing of the key', () => {
    expect(box.keyId).toMatch(/^[0-9a-f]{16}$/);
    expect(new SecretBox(Buffer.from(key)).keyId).toBe(box.keyId);
    expect(new SecretBox(randomBytes(32)).keyId).not.toBe(box.keyId);
    expect(key.toString('hex')).not.toContain(box.keyId);
    expect(JSON.stringify({ box })).not.toContain(key.toString('hex'));
  });

  it('refuses a key of the wrong size', () => {
    expect(() => new SecretBox(randomBytes(16))).toThrow('a secrets key has 32 bytes, not 16');
  });
});
