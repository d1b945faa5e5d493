/**
 * The labels fnts puts on every container it starts (agent/owner.ts says
 * what they mean and how a server finds its own): the agent labels function
 * containers with them, a pool manager its runner containers.
 */

/** The server's data directory, hashed: stable across restarts. */
export const OWNER_LABEL = 'fnts.owner';
/** The process that started it: host/pid/start ticks. */
export const INSTANCE_LABEL = 'fnts.instance';
/** FN_CONTAINER_LABEL_TAG, when set. */
export const TAG_LABEL = 'fnts.tag';
