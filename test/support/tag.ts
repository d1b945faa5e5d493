/**
 * The test run's container tag: the global setup picks one per run and every
 * fnts server a test starts labels its containers with it
 * (FN_CONTAINER_LABEL_TAG), so the run checks and removes only what it made,
 * never a user's own server's containers or another run's.
 */
export const RUN_TAG_ENV = 'FN_CONTAINER_LABEL_TAG';

/** `{ FN_CONTAINER_LABEL_TAG: <run tag> }` for a server's environment, or `{}` outside a test run. */
export function testRunTag(): Record<string, string> {
  const tag = process.env[RUN_TAG_ENV];
  return tag ? { [RUN_TAG_ENV]: tag } : {};
}
