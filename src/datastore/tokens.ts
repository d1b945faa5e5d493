/**
 * API tokens as stored: never the token itself, only its digest
 * (auth/token.ts). The TokenStore is small and read whole: every node
 * keeps the list in memory and reads it again often (auth/registry.ts),
 * so a token revoked on one node stops working on every node sharing the
 * database within a second.
 */
export interface TokenRecord {
  readonly id: string;
  readonly name: string;
  /** One of auth/token.ts's ROLES. */
  readonly role: string;
  /** App names the token is limited to; undefined = every app. */
  readonly apps: readonly string[] | undefined;
  /** SHA-256 of the token, hex. */
  readonly digest: string;
  readonly created_at: string;
  /** RFC 3339; undefined = never. */
  readonly expires_at: string | undefined;
}

export interface TokenStore {
  /** Every token, oldest first. */
  listTokens(): Promise<TokenRecord[]>;
  insertToken(token: TokenRecord): Promise<void>;
  /** False when there was no such token. */
  removeToken(id: string): Promise<boolean>;
}
