/*
 * Error strings for the SF_E_* band and for negative errno values, and the helpers that
 * fill a caller's message buffer. Library code reports detail through these buffers and
 * never prints.
 */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "shmfeed/shmfeed.h"
#include "common/errors.h"

static const char *const sf_messages[] = {
	[-(SF_E_NOT_SHMFEED - SF_E_BASE)] = "not a shmfeed arena",
	[-(SF_E_LAYOUT - SF_E_BASE)] = "arena of another layout version",
	[-(SF_E_UID - SF_E_BASE)] = "arena owned by another user",
	[-(SF_E_GEOMETRY - SF_E_BASE)] = "arena geometry does not match",
	[-(SF_E_BUSY - SF_E_BASE)] = "in use by a live process",
	[-(SF_E_CONFIG - SF_E_BASE)] = "invalid configuration",
	[-(SF_E_TIMEOUT - SF_E_BASE)] = "timed out",
	[-(SF_E_CHECKSUM - SF_E_BASE)] = "payload checksum mismatch",
	[-(SF_E_STOPPED - SF_E_BASE)] = "job stopped",
	[-(SF_E_RANGE - SF_E_BASE)] = "out of range",
	[-(SF_E_CUDA - SF_E_BASE)] = "CUDA driver error",
	[-(SF_E_TOKENIZER - SF_E_BASE)] = "tokenizer error",
	[-(SF_E_SOURCE - SF_E_BASE)] = "data source error",
	[-(SF_E_STATE - SF_E_BASE)] = "call not valid in this state",
	[-(SF_E_DIGEST - SF_E_BASE)] = "config digest mismatch",
	[-(SF_E_AGAIN - SF_E_BASE)] = "nothing ready yet",
	[-(SF_E_PROTOCOL - SF_E_BASE)] = "malformed control message",
	[-(SF_E_END - SF_E_BASE)] = "end of data",
	[-(SF_E_JOB_GONE - SF_E_BASE)] = "the job's launcher is gone",
};

const char *sf_strerror(int err)
{
	if (err >= 0)
		return "success";
	if (err <= SF_E_BASE - 1 && err >= SF_E_LAST) {
		const char *m = sf_messages[-(err - SF_E_BASE)];
		return m ? m : "unknown shmfeed error";
	}
	if (err > -4096) {
		/* strerror() may return a buffer shared between threads; the "%m"-free
		 * strerrordesc_np() returns a static string. */
		const char *m = strerrordesc_np(-err);
		return m ? m : "unknown error";
	}
	return "unknown error";
}

const char *sf_version(void)
{
	return SF_VERSION_STRING;
}

int sf__err(struct sf_err *e, int code, const char *fmt, ...)
{
	if (e) {
		va_list ap;

		va_start(ap, fmt);
		vsnprintf(e->msg, sizeof(e->msg), fmt, ap);
		va_end(ap);
		e->code = code;
	}
	return code;
}

void sf__err_copy(const struct sf_err *e, char *buf, size_t len)
{
	if (!buf || !len)
		return;
	snprintf(buf, len, "%s", e->msg);
}
