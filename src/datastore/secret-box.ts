/**
 * Encryption of secrets at rest: AES-256-GCM (node:crypto) under one key.
 *
 * A sealed value is, byte for byte:
 *
 *   version (1 byte, 1) | nonce (12 random bytes) | ciphertext | tag (16 bytes)
 *
 * and is bound to where it is kept by additional authenticated data (the
 * owner and name of its row, in the caller's words): a sealed value copied
 * to another row, another owner or another name does not open, nor does
 * one whose bytes were changed, nor one sealed under another key. A fresh
 * random nonce per seal: with 96-bit random nonces one key may seal about
 * 2^32 values before a repeated nonce becomes a risk (NIST SP 800-38D),
 * far more than a database of secrets sees.
 */
import { createCipheriv, createDecipheriv, createHmac, randomBytes } from 'node:crypto';

const VERSION = 1;
const NONCE_BYTES = 12;
const TAG_BYTES = 16;
const KEY_BYTES = 32;
/** What sealing adds to a value's length. */
export const SEAL_OVERHEAD = 1 + NONCE_BYTES + TAG_BYTES;

/** A sealed value that does not open: altered, moved, or sealed under another key. Says nothing of the value. */
export class UnsealError extends Error {
  override readonly name = 'UnsealError';
}

export class SecretBox {
  readonly #key: Buffer;
  /**
   * A fingerprint of the key, safe to store and show (an HMAC of a constant
   * under the key tells nothing of the key): what a database records beside
   * each sealed value, so that a server started with another key can say
   * so at once instead of failing each value.
   */
  readonly keyId: string;

  constructor(key: Buffer) {
    if (key.length !== KEY_BYTES) throw new Error(`a secrets key has ${KEY_BYTES} bytes, not ${key.length}`);
    this.#key = Buffer.from(key);
    this.keyId = createHmac('sha256', this.#key).update('fnts secret key id').digest('hex').slice(0, 16);
  }

  /** Seals `value` for the place `aad` names. */
  seal(value: Buffer, aad: string): Buffer {
    const nonce = randomBytes(NONCE_BYTES);
    const version = Buffer.of(VERSION);
    const cipher = createCipheriv('aes-256-gcm', this.#key, nonce, { authTagLength: TAG_BYTES });
    cipher.setAAD(Buffer.concat([version, Buffer.from(aad, 'utf8')]));
    const body = Buffer.concat([cipher.update(value), cipher.final()]);
    return Buffer.concat([version, nonce, body, cipher.getAuthTag()]);
  }

  /** Opens what seal() made for the same `aad` under the same key; throws UnsealError otherwise. */
  open(sealed: Buffer, aad: string): Buffer {
    if (sealed.length < SEAL_OVERHEAD || sealed[0] !== VERSION) throw new UnsealError('not a sealed value of a version this server reads');
    const nonce = sealed.subarray(1, 1 + NONCE_BYTES);
    const tag = sealed.subarray(sealed.length - TAG_BYTES);
    const body = sealed.subarray(1 + NONCE_BYTES, sealed.length - TAG_BYTES);
    try {
      const decipher = createDecipheriv('aes-256-gcm', this.#key, nonce, { authTagLength: TAG_BYTES });
      decipher.setAAD(Buffer.concat([sealed.subarray(0, 1), Buffer.from(aad, 'utf8')]));
      decipher.setAuthTag(tag);
      return Buffer.concat([decipher.update(body), decipher.final()]);
    } catch (err) {
      throw new UnsealError('it does not open with this key: sealed under another key, moved from another row, or altered', { cause: err });
    }
  }

  toJSON(): string {
    return `[secret box ${this.keyId}]`;
  }
}
