/**
 * Where an LB's call records and logs go: the API node's store, through
 * POST /v2/runner/calls (server/calls.ts). The LB's CallRecorder batches
 * them as a full node's does; this sends each batch, split so that no
 * request is larger than RECORD_BATCH_BYTES. Records past their retention
 * are removed by the API node itself.
 */
import type { CallLogEntry, CallStore } from '../datastore/index.js';
import { type CallRecord, RECORD_BATCH_BYTES } from '../models/index.js';
import { apiHeaders, refusedToken } from './lookup.js';

export class RemoteCallStore implements Pick<CallStore, 'insert' | 'insertSerialized' | 'prune'> {
  private readonly url: string;

  constructor(
    private readonly apiUrl: string,
    /** FN_TOKEN: a token with the fleet role. */
    private readonly token: string | undefined = undefined,
    private readonly timeoutMs = 30_000,
  ) {
    this.url = `${apiUrl.replace(/\/+$/, '')}/v2/runner/calls`;
  }

  insert(records: readonly CallRecord[], logs: readonly CallLogEntry[] = []): Promise<void> {
    return this.insertSerialized(
      records.map((r) => JSON.stringify(r)),
      logs,
    );
  }

  async insertSerialized(records: readonly string[], logs: readonly CallLogEntry[] = []): Promise<void> {
    const batch = { records: [] as string[], logs: [] as string[] };
    let bytes = 0;
    const send = async (): Promise<void> => {
      if (bytes === 0) return;
      const body = `{"records":[${batch.records.join(',')}],"logs":[${batch.logs.join(',')}]}`;
      batch.records = [];
      batch.logs = [];
      bytes = 0;
      const res = await fetch(this.url, { method: 'POST', body, headers: apiHeaders(this.token, { 'Content-Type': 'application/json' }), signal: AbortSignal.timeout(this.timeoutMs) });
      if (res.status === 401 || res.status === 403) throw refusedToken(this.apiUrl, res.status);
      if (!res.ok) throw new Error(`the API node refused call records: ${res.status} ${await res.text()}`);
    };
    const add = async (kind: keyof typeof batch, json: string): Promise<void> => {
      if (bytes + json.length > RECORD_BATCH_BYTES) await send();
      batch[kind].push(json);
      bytes += json.length;
    };
    for (const r of records) await add('records', r);
    for (const l of logs) await add('logs', JSON.stringify(l));
    await send();
  }

  /** The API node prunes its own store. */
  async prune(): Promise<number> {
    return 0;
  }
}
