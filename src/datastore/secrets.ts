/**
 * The SecretStore keeps the secrets of apps and fns (models/secret.ts),
 * encrypted at rest. Every implementation must pass `runSecretStoreContract`
 * (datastore/secrets.contract.ts).
 *
 * Rules every implementation MUST keep:
 * - A value is stored only sealed (secret-box.ts), bound to its owner and
 *   name: the database never holds it in clear, and a sealed value moved to
 *   another row does not open.
 * - Values leave only through `valuesFor` (for the containers of a fn, on
 *   this node or, through the fleet's endpoint and an LB, on a runner);
 *   listings and answers carry names, times and versions.
 * - An owner that does not exist throws `AppsNotFound` / `FnsNotFound`; a
 *   missing secret `SecretNotFound`. A write past the limits (MAX_SECRETS
 *   per owner, MAX_SECRETS_BYTES of values per owner) throws
 *   `TooManySecrets` and changes nothing; the check and the write are one
 *   transaction.
 * - Deleting an app deletes its secrets and its fns' secrets; deleting a fn
 *   deletes its secrets (the Datastore's removeApp/removeFn, atomically).
 * - A write keeps `created_at` and changes `updated_at` and `version`.
 * - Lists are ordered by name (bytewise).
 */
import type { SecretInfo, SecretOwner } from '../models/index.js';

export interface SecretStore {
  /** Sets the secret `name` of `owner` to `value` (sealed), at time `now` (RFC 3339). */
  putSecret(owner: SecretOwner, name: string, value: Buffer, now: string): Promise<SecretInfo>;
  /** The owner's secrets, without values. */
  listSecrets(owner: SecretOwner): Promise<SecretInfo[]>;
  removeSecret(owner: SecretOwner, name: string): Promise<void>;
  /**
   * What the containers of fn `fnId` of app `appId` get: the app's secrets
   * and the fn's, the fn's winning on a name both have. Throws UnsealError
   * (secret-box.ts) naming the secret (never its value) when one does not
   * open. Owners that do not exist simply have none.
   */
  valuesFor(appId: string, fnId: string): Promise<Map<string, Buffer>>;
  /**
   * A digest of the names and versions of the secrets `valuesFor` would
   * give, '' when there are none: it changes whenever they do (CallFn.secretsVersion).
   */
  versionFor(appId: string, fnId: string): Promise<string>;
}
