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
 * sf__proc_alive - 0 when the process (pid, starttime) is known gone: no such process,
 * an exited zombie, or the pid now names a process with another start time. 1 otherwise,
 * also when that cannot be told (a /proc read error, a start time of 0): a caller
 * repairs only after a known death. Participants and creators of arenas use lock fences
 * instead (common/arena.h); this serves the shared chunk cache's fillers.
 */
int sf__proc_alive(pid_t pid, uint64_t starttime);

/*
 * sf__proc_children - the pids of the live children of `parent` (processes whose parent
 * it is, zombies included), at most `max` of them, from /proc. Returns their count.
 */
size_t sf__proc_children(pid_t parent, pid_t *out, size_t max);

/*
 * sf__children_waitable - SIGCHLD back to its default, so that children can be waited for:
 * SIG_IGN (or SA_NOCLDWAIT) survives execve, and with it the kernel reaps children
 * itself, so waitpid() never reports them (a program that ignores SIGCHLD and starts
 * `shmfeed run` left a launcher that never saw its command end). For the commands that
 * fork: call before the first fork().
 */
void sf__children_waitable(void);

/* sf__now_ns - CLOCK_MONOTONIC in nanoseconds (system-wide, comparable across processes). */
uint64_t sf__now_ns(void);

#endif
