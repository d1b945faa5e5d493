// Types of runner-image.mjs, for the TypeScript that imports it (test/support/images.ts).
export const RUNNER_IMAGE_REPO: string;
export function buildRunnerImage(say?: (line: string) => void): Promise<string>;
