/*
 * Program-side logging. Each line is formatted into one buffer and written with one
 * write(2), so lines of concurrent processes sharing stderr do not interleave.
 */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "common/log.h"

static char log_who[64];
static int log_quiet;

void sf__log_set_who(const char *who)
{
	snprintf(log_who, sizeof(log_who), "%s", who ? who : "");
}

void sf__log_set_quiet(int quiet)
{
	log_quiet = quiet;
}

__attribute__((format(printf, 1, 0))) static void log_line(const char *fmt, va_list ap)
{
	char line[1024];
	int n;

	if (log_who[0])
		n = snprintf(line, sizeof(line), "shmfeed: %s: ", log_who);
	else
		n = snprintf(line, sizeof(line), "shmfeed: ");
	n += vsnprintf(line + n, sizeof(line) - (size_t)n - 1, fmt, ap);
	if (n > (int)sizeof(line) - 2)
		n = (int)sizeof(line) - 2;
	line[n++] = '\n';
	/* A short write to stderr leaves nothing useful to do. */
	if (write(STDERR_FILENO, line, (size_t)n) < 0)
		return;
}

void sf__log_info(const char *fmt, ...)
{
	va_list ap;

	if (log_quiet)
		return;
	va_start(ap, fmt);
	log_line(fmt, ap);
	va_end(ap);
}

void sf__log_error(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	log_line(fmt, ap);
	va_end(ap);
}
