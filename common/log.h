/*
 * Logging for programs (the shmfeed command, producers, the supervisor): one line to
 * stderr, "shmfeed: WHO: message". Library code never logs; it returns errors.
 */
#ifndef SF_COMMON_LOG_H
#define SF_COMMON_LOG_H

#include <stddef.h>

/* sf__log_set_who - name the current process in log lines ("producer 3"); copied. */
void sf__log_set_who(const char *who);

/* sf__log_set_quiet - suppress informational lines (errors still print). */
void sf__log_set_quiet(int quiet);

/*
 * sf__log_set_bounded - from now on, in this process and the children it forks, a line
 * that stderr does not take within `wait_ms` (a pipe whose reader has stopped reading) is
 * dropped instead of blocking, and so are the lines after it until stderr takes one,
 * which is preceded by how many were dropped. 0: lines wait as long as it takes. For a
 * supervisor and its producers, whose loops must go on whoever reads their messages.
 */
void sf__log_set_bounded(int wait_ms);

/* sf__log_after_fork - in a child: the parent's dropped lines are not the child's. */
void sf__log_after_fork(void);

/* sf__log_flush - say how many lines were dropped, if some were and nothing said it. */
void sf__log_flush(void);

/* sf__log_write - write `len` bytes (at most PIPE_BUF: one line) as a log line is. */
void sf__log_write(const char *buf, size_t len);

__attribute__((format(printf, 1, 2))) void sf__log_info(const char *fmt, ...);
__attribute__((format(printf, 1, 2))) void sf__log_error(const char *fmt, ...);

#endif
