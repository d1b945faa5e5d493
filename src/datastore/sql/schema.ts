/** The tables of the SQL datastore, as Kysely types them (migrations.ts creates them). */
import type { Generated } from 'kysely';

export interface AppsTable {
  id: string;
  name: string;
  config: string;
  annotations: string;
  syslog_url: string | null;
  shape: string;
  created_at: string;
  updated_at: string;
}

export interface FnsTable {
  id: string;
  name: string;
  app_id: string;
  image: string;
  memory: number;
  timeout: number;
  idle_timeout: number;
  format: string;
  config: string;
  annotations: string;
  shape: string;
  created_at: string;
  updated_at: string;
}

export interface TriggersTable {
  id: string;
  name: string;
  app_id: string;
  fn_id: string;
  type: string;
  source: string;
  annotations: string;
  created_at: string;
  updated_at: string;
}

export interface CallsTable {
  id: string;
  fn_id: string;
  app_id: string;
  status: string;
  created_at: string;
  /** The CallRecord as JSON. */
  record: string;
  /** What the call's container wrote (capped); null until it is stored. */
  log: string | null;
}

export interface MqTable {
  id: string;
  fn_id: string;
  call_json: string;
  /** The body's size; the body itself is small_body, or in mq_bodies. */
  body_bytes: number;
  /** The body when small (mq/sql.ts: SMALL_BODY_BYTES, Postgres and MySQL); null: in mq_bodies, or empty. */
  small_body: Buffer | null;
  attempts: number;
  max_attempts: number;
  /** ready | leased | dead */
  state: string;
  enqueued_at: number;
  available_at: number;
  lease_until: number;
  /** The worker's process (owner.ts's instance) while leased. */
  leased_by: string | null;
  reason: string | null;
  /** Leases taken back from holders that died (mq/queue.ts). */
  redeliveries: number;
  /** When a dead item died (ms since the epoch); null for the others. */
  dead_at: number | null;
}

/** A queued call's body, in chunks (mq/sql.ts). */
export interface MqBodiesTable {
  id: string;
  seq: number;
  chunk: Buffer;
  /** When it was written (ms since the epoch): a body no item refers to is removed some time after. */
  created_at: number;
}

export interface MqKeysTable {
  fn_id: string;
  key: string;
  call_id: string;
  created_at: number;
}

export interface TokensTable {
  id: string;
  name: string;
  role: string;
  /** JSON array of app names, or null: every app. */
  apps: string | null;
  digest: string;
  created_at: string;
  expires_at: string | null;
}

/** Secrets of apps and fns (sql/secrets.ts); `value` is sealed (secret-box.ts). */
export interface SecretsTable {
  owner_kind: 'app' | 'fn';
  owner_id: string;
  name: string;
  /** The owner's app (itself, or the fn's app). */
  app_id: string;
  /** The owning fn; null for an app's secret. */
  fn_id: string | null;
  value: Buffer;
  version: string;
  key_id: string;
  created_at: string;
  updated_at: string;
}

/** Changes for the other nodes on the database (change-feed.ts). */
export interface ChangesTable {
  id: Generated<number>;
  /** The node that made it. */
  origin: string;
  /** The ResourceChange, as JSON. */
  body: string;
  /** When (ms since the epoch): pruned some minutes later. */
  at: number;
}

/** Each fn's keep-alive histogram (keepalive.ts): a HistogramSnapshot as JSON. */
export interface KeepAliveHistogramsTable {
  fn_id: string;
  data: string;
  /** When it was written (ms since the epoch). */
  updated_at: number;
}

export interface Schema {
  apps: AppsTable;
  fns: FnsTable;
  triggers: TriggersTable;
  calls: CallsTable;
  mq: MqTable;
  mq_bodies: MqBodiesTable;
  mq_keys: MqKeysTable;
  tokens: TokensTable;
  secrets: SecretsTable;
  changes: ChangesTable;
  keepalive_histograms: KeepAliveHistogramsTable;
}
