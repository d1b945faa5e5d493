/**
 * A pure runner's secrets: it keeps no database, so the values of a fn's
 * secrets come with its calls (TryCall.models_call_json's SECRETS_FIELD,
 * from an fnts LB) and are held here, in memory, per fn and version
 * (CallFn.secretsVersion), while calls that brought them run and a short
 * while after (LINGER_MS: a container started for a call that was served by
 * another meanwhile still finds them). The agent asks for them as its
 * SecretSource when it starts a container of that fn and version.
 *
 * Values are never logged, never part of a Call, and never sent back.
 */

/** How long values stay once no call that brought them runs. */
const LINGER_MS = 30_000;

interface Held {
  values: ReadonlyMap<string, Buffer>;
  calls: number;
  timer: NodeJS.Timeout | undefined;
}

export class RunnerSecrets {
  private readonly held = new Map<string, Held>();

  constructor(private readonly lingerMs = LINGER_MS) {}

  /**
   * Holds `values` of fn `fnId`'s secrets of `version` while a call that
   * brought them runs: call the answer when it is over (once).
   */
  hold(fnId: string, version: string, values: ReadonlyMap<string, string>): () => void {
    const key = `${fnId}\0${version}`;
    const bytes = new Map<string, Buffer>();
    for (const [name, value] of values) bytes.set(name, Buffer.from(value, 'utf8'));
    let h = this.held.get(key);
    if (!h) this.held.set(key, (h = { values: bytes, calls: 0, timer: undefined }));
    // The latest call's: one version has one set of values, so this changes nothing unless an LB erred.
    else h.values = bytes;
    if (h.timer) clearTimeout(h.timer);
    h.timer = undefined;
    h.calls++;
    const entry = h;
    let released = false;
    return () => {
      if (released) return;
      released = true;
      if (--entry.calls > 0) return;
      entry.timer = setTimeout(() => {
        if (this.held.get(key) === entry && entry.calls === 0) this.held.delete(key);
      }, this.lingerMs);
      entry.timer.unref();
    };
  }

  /**
   * The SecretSource's question: the values held for fn `fnId`'s secrets of
   * `version`. None for a fn without secrets; rejects when the fn has
   * secrets but no call brought them (Fn's LB, which sends none).
   */
  secretsFor(_appId: string, fnId: string, version?: string): Promise<ReadonlyMap<string, Buffer>> {
    if (!version) return Promise.resolve(new Map());
    const h = this.held.get(`${fnId}\0${version}`);
    if (!h) return Promise.reject(new Error(`no call brought the secrets of fn ${fnId} (version ${version}) to this runner: only an fnts LB sends them`));
    return Promise.resolve(h.values);
  }

  /** Forgets every value. */
  clear(): void {
    for (const h of this.held.values()) if (h.timer) clearTimeout(h.timer);
    this.held.clear();
  }
}
