/*
 * Logging for programs (the shmfeed command, producers, the supervisor): one line to
 * stderr, "shmfeed: WHO: message". Library code never logs; it returns errors.
 */
#ifndef SF_COMMON_LOG_H
#define SF_COMMON_LOG_H

/* sf__log_set_who - name the current process in log lines ("producer 3"); copied. */
void sf__log_set_who(const char *who);

/* sf__log_set_quiet - suppress informational lines (errors still print). */
void sf__log_set_quiet(int quiet);

__attribute__((format(printf, 1, 2))) void sf__log_info(const char *fmt, ...);
__attribute__((format(printf, 1, 2))) void sf__log_error(const char *fmt, ...);

#endif
