/** What the Docker engine's errors carry, as dockerode hands them over: the HTTP status and the engine's own words. */

/** The engine's HTTP status of a failed request, when it answered. */
export function statusCode(err: unknown): number | undefined {
  const code = (err as { statusCode?: unknown } | null)?.statusCode;
  return typeof code === 'number' ? code : undefined;
}

/** The engine's message (its JSON answer's), else the error's own. */
export function engineMessage(err: unknown): string {
  const json = (err as { json?: { message?: string } } | null)?.json;
  if (json?.message) return json.message;
  return err instanceof Error ? err.message : String(err);
}
