/**
 * What a test run left behind: the containers carrying the run's tag, and
 * nothing else (a user's own fnts server on the same engine, or another
 * run, is none of the suite's business).
 */
import type Docker from 'dockerode';
import { TAG_LABEL } from '../../src/agent/index.js';
import { docker } from './images.js';

export function containersOfRun(tag: string): Promise<Docker.ContainerInfo[]> {
  return docker().listContainers({ all: true, filters: { label: [`${TAG_LABEL}=${tag}`] } });
}
