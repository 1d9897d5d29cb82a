/*
 * Reads of mapped source files that survive the file being truncated: a page past the
 * file's new end raises SIGBUS on the thread that reads it, which killed the process
 * (a producer, the launcher building an index, a tokenize worker) with no word of which
 * file.
 */
#ifndef SF_PRODUCER_SIGBUS_H
#define SF_PRODUCER_SIGBUS_H

struct sf_err;

/*
 * sf__sigbus_call - fn(arg), with a SIGBUS that this thread raises inside it made a
 * return: -EFAULT, with the faulting address in *ret_addr (NULL otherwise), else fn's
 * return. The process's handler is installed on first use (`e` says it when that
 * fails); a SIGBUS outside such a call keeps its default action. Within a call already,
 * fn runs under that call's guard. What fn had allocated when it faulted is not freed:
 * the callers stop their work with an error naming the file, freeing what they know of.
 */
int sf__sigbus_call(int (*fn)(void *arg), void *arg, void **ret_addr, struct sf_err *e);

/* The error of a read at byte `off` of `path` that faulted, or found the end of the file
 * there: SF_E_SOURCE, the file shorter than when it was opened. */
int sf__sigbus_truncated(const char *path, unsigned long long off, struct sf_err *e);

#endif
