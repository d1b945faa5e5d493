// Types of node-image.mjs, for the TypeScript that imports it (test/support/images.ts).
import type Docker from 'dockerode';

export function docker(): Docker;
export function imageExists(tag: string): Promise<boolean>;
export function listFiles(dir: string, base?: string): string[];
export function buildImage(context: string, tags: string | readonly string[]): Promise<void>;
export function digest(parts: ReadonlyArray<string | Buffer>): string;
export function sharedLibraries(binary: string): string[];
export function copyIntoRootfs(rootfs: string, files: readonly string[]): void;
export function nodeRootfs(rootfs: string): string[];
