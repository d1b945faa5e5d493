/**
 * drivers/ — containers: the Driver/Cookie contract, the Docker driver and
 * the network it fences for functions, and a fake driver for unit tests of
 * the scheduling logic.
 */
export { ContainerStartError, decimate, DriverError, ImageError } from './driver.js';
export type { ContainerInfo, ContainerSpec, Cookie, Driver, Mount, PrepareTimings, RunResult, RunStatus, Stat } from './driver.js';
export { DockerDriver } from './docker/docker.js';
export type { DockerDriverOptions } from './docker/docker.js';
export { FunctionNetwork, NETWORK_LABEL } from './docker/network.js';
export type { ContainerNetwork, FunctionNetworkMode, FunctionNetworkOptions, Isolation } from './docker/network.js';
export { bridgeName, DEFAULT_NETWORK, fenceChains, LINK_LOCAL, USERS_CHAIN } from './docker/isolation.js';
export type { BlockSpec } from './docker/isolation.js';
export { FakeDriver } from './fake/fake.js';
export type { FakeContainerState, FakeFunction, FakeProcess } from './fake/fake.js';
