/*
 * Process identity: a pid alone is reused by the kernel, so shmfeed records (pid, start
 * time) and treats a process as the same one only when both match. The start time is
 * field 22 of /proc/PID/stat, in clock ticks since boot.
 */
#ifndef SF_COMMON_PROC_H
#define SF_COMMON_PROC_H

#include <stdint.h>
#include <sys/types.h>

/* sf__proc_starttime - start time of `pid`; 0 and -errno when it cannot be read. */
int sf__proc_starttime(pid_t pid, uint64_t *ret_starttime);

/*
 * sf__proc_alive - 1 when the process (pid, starttime) still exists (and is not a
 * zombie), 0 when it is gone or the pid now names another process.
 */
int sf__proc_alive(pid_t pid, uint64_t starttime);

/* sf__now_ns - CLOCK_MONOTONIC in nanoseconds (system-wide, comparable across processes). */
uint64_t sf__now_ns(void);

#endif
