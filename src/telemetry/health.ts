/**
 * Readiness: whether this process can do its job now, asked of each thing
 * it depends on (the datastore, the Docker engine, later a role's runners)
 * through a named check. Each role passes its own list; the server answers
 * Kubernetes' readiness probe with the result (GET /ready), while liveness
 * (GET /health) asks nothing: a process that serves HTTP is alive, and
 * restarting it would not bring a missing database back.
 *
 * Every check runs at once and is bounded by a timeout, so a hung
 * dependency makes the probe answer "not ready" in time rather than making
 * the prober give up without a reason.
 */
import type { BaseLogger } from 'pino';
import { within } from '../time/index.js';

export interface HealthCheck {
  /** The key of this check in the report: `datastore`, `docker`. */
  readonly name: string;
  /**
   * Resolves when the dependency answers; rejects with an error whose
   * message tells an operator what failed ("the Docker engine does not
   * answer: connect ENOENT ..."). Should stop its work when `signal`
   * aborts (the timeout passed); its result is ignored from then on. May be
   * slow, must be cheap (probes run every few seconds).
   */
  check(signal: AbortSignal): Promise<void>;
}

export interface ReadinessReport {
  readonly ready: boolean;
  /** Each check's name: `ok`, or what failed. */
  readonly checks: Readonly<Record<string, string>>;
}

/** Long enough for a busy engine or database to answer, short enough for a probe's own timeout of a few seconds. */
export const CHECK_TIMEOUT_MS = 2000;

export interface ReadinessOptions {
  /** How long each check may take before it counts as failed (default CHECK_TIMEOUT_MS). */
  readonly timeoutMs?: number;
  /** Where changes of readiness are told (once per change, not per probe). */
  readonly log?: Pick<BaseLogger, 'info' | 'warn'>;
}

/** What one check says: 'ok', its error's message, or that it did not answer in time. */
async function run(check: HealthCheck, timeoutMs: number): Promise<string> {
  const abort = new AbortController();
  const answer = Promise.resolve()
    .then(() => check.check(abort.signal))
    .then(
      () => 'ok',
      (err: unknown) => (err instanceof Error ? err.message : String(err)) || 'failed',
    );
  return within(answer, timeoutMs, () => {
    abort.abort(new Error('readiness check timed out'));
    return `no answer within ${timeoutMs} ms`;
  });
}

export class Readiness {
  private readonly timeoutMs: number;
  /** The last answer's failures, to log only when they change. */
  private lastFailures = '';

  constructor(
    private readonly checks: readonly HealthCheck[],
    private readonly options: ReadinessOptions = {},
  ) {
    this.timeoutMs = options.timeoutMs ?? CHECK_TIMEOUT_MS;
  }

  /** Runs every check at once; ready when all say ok. Never rejects. */
  async check(): Promise<ReadinessReport> {
    const results = await Promise.all(this.checks.map((c) => run(c, this.timeoutMs)));
    const checks: Record<string, string> = {};
    this.checks.forEach((c, i) => (checks[c.name] = results[i]!));
    const failing = Object.entries(checks).filter(([, v]) => v !== 'ok');
    this.tell(failing);
    return { ready: failing.length === 0, checks };
  }

  /** Logs a change of readiness: probes come every few seconds, so an unchanged state is not repeated. */
  private tell(failing: ReadonlyArray<[string, string]>): void {
    const failures = JSON.stringify(failing);
    if (failures === this.lastFailures) return;
    const was = this.lastFailures;
    this.lastFailures = failures;
    if (failing.length > 0) this.options.log?.warn({ checks: Object.fromEntries(failing) }, 'not ready');
    else if (was !== '') this.options.log?.info('ready again');
  }
}
