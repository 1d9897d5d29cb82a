/*
 * Internal error reporting: a fixed-size message buffer that library functions fill with
 * detail (a path, a byte offset, a YAML position, a CUresult name) beside the int code
 * they return. No allocation, so it can be used on every path.
 */
#ifndef SF_COMMON_ERRORS_H
#define SF_COMMON_ERRORS_H

#include <stddef.h>

#ifndef SF_VERSION_STRING
#define SF_VERSION_STRING "0.1.0"
#endif

struct sf_err {
	int code;
	char msg[512];
};

/*
 * sf__err - record `code` and a formatted message in `e` (which may be NULL) and return
 * `code`, so that callers can write `return sf__err(e, -ENOENT, "...")`.
 */
__attribute__((format(printf, 3, 4))) int sf__err(struct sf_err *e, int code, const char *fmt, ...);

/* sf__err_copy - copy the message into a caller's buffer, NUL-terminated. */
void sf__err_copy(const struct sf_err *e, char *buf, size_t len);

#endif
