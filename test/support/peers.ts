/**
 * Programs a test needs that a user's fresh clone may lack (the Fn Project's
 * own programs in ../shared/bin, promtool): a test skips, saying why, where
 * one is absent, and fails instead under CI=true, where CI always has them,
 * so a run that tested nothing can never pass as one that did.
 */

/**
 * True when `present`; otherwise warns that `what` is skipped and why, and
 * answers false; under CI=true throws instead, naming what to install.
 */
export function peerPresent(present: boolean, what: string, why: string): boolean {
  if (present) return true;
  if (process.env['CI'] === 'true') throw new Error(`${what} cannot run: ${why}. CI=true needs it (.ci/run installs or expects it)`);
  console.warn(`${what} skipped: ${why}`);
  return false;
}
