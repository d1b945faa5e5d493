/**
 * Call: the record of one function call (Fn's Call, spec/fn-swagger-v1-2018.yml),
 * with the container's resource use sampled during the call and where the
 * time went.
 */

export type CallStatus = 'success' | 'error' | 'timeout' | 'cancelled';

/** One sample of the container's use while the call ran (Fn's Stat). */
export interface CallStat {
  /** RFC 3339 */
  readonly timestamp: string;
  /** net_rx, net_tx, mem_limit, mem_usage, disk_read, disk_write, cpu_user, cpu_total, cpu_kernel */
  readonly metrics: Readonly<Record<string, number>>;
}

/** Where a call's time went, in milliseconds. */
export interface CallTimings {
  /** Arrival until a container was ready for the call (queueing, and starting one if needed). */
  readonly wait_ms: number;
  /** The function's own time: request sent until answer received. */
  readonly exec_ms: number;
  /** For a call that started its container: making the image available (inspect or pull). */
  readonly image_ms?: number;
  /** ... creating the container. */
  readonly create_ms?: number;
  /** ... from start until the function was ready for calls. */
  readonly start_ms?: number;
}

export interface CallRecord {
  readonly id: string;
  readonly status: CallStatus;
  /** Why the call failed, when it did. */
  readonly error?: string;
  readonly app_id: string;
  readonly app_name: string;
  readonly fn_id: string;
  /** The path the caller used (the trigger's, or /invoke/{fnID}). */
  readonly path: string;
  readonly created_at: string;
  readonly started_at?: string;
  readonly completed_at: string;
  readonly stats: readonly CallStat[];
  readonly timings: CallTimings;
}

/** Fn's call status for an answer's HTTP status (504 is a timeout, 499 a caller that left). */
export function callStatus(httpStatus: number): CallStatus {
  if (httpStatus === 504) return 'timeout';
  if (httpStatus === 499) return 'cancelled';
  return httpStatus >= 500 ? 'error' : 'success';
}
