/*
 * Program-side logging. Each line is formatted into one buffer and written with one
 * write(2), so lines of concurrent processes sharing stderr do not interleave.
 */
#include <errno.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/uio.h>
#include <unistd.h>

#include "common/log.h"

static char log_who[64];
static int log_quiet;
/* Bounded mode: how long a line waits for stderr to take it before it is dropped (0:
 * not bounded, a line waits as long as it takes); whether the lines go without waiting
 * (one was dropped since the mode was set or a line written); how many were dropped. */
static int log_wait_ms, log_hurry;
static unsigned long log_dropped;

void sf__log_set_who(const char *who)
{
	snprintf(log_who, sizeof(log_who), "%s", who ? who : "");
}

void sf__log_set_quiet(int quiet)
{
	log_quiet = quiet;
}

void sf__log_set_bounded(int wait_ms)
{
	log_wait_ms = wait_ms > 0 ? wait_ms : 0;
	log_hurry = 0;
}

void sf__log_after_fork(void)
{
	log_dropped = 0;
	log_hurry = 0;
}

/*
 * Whether stderr takes a line within `ms`. A pipe reports room for a page, and a line
 * of at most PIPE_BUF bytes then goes in one write without waiting (another writer can
 * take the room first: then the write waits, as every write did before). An error or a
 * reader gone counts as ready: the write fails at once.
 */
static int stderr_ready(int ms)
{
	struct pollfd p = {.fd = STDERR_FILENO, .events = POLLOUT};
	int r;

	do
		r = poll(&p, 1, ms);
	while (r < 0 && errno == EINTR);
	return r != 0;
}

void sf__log_write(const char *buf, size_t len)
{
	char note[256];
	struct iovec iov[2];
	int k = 0;

	/* After one line dropped, the next ones do not wait: a stderr that nobody reads
	 * costs a supervisor or a producer one wait, not one per line. */
	if (log_wait_ms && !stderr_ready(log_hurry ? 0 : log_wait_ms)) {
		log_dropped++;
		log_hurry = 1;
		return;
	}
	log_hurry = 0;
	if (log_dropped) {
		k = snprintf(note, sizeof(note),
			     "shmfeed: %s%s%lu log line%s dropped: stderr was not being read\n",
			     log_who, log_who[0] ? ": " : "", log_dropped,
			     log_dropped == 1 ? "" : "s");
		log_dropped = 0;
	}
	if (k < 0)
		k = 0;
	if ((size_t)k >= sizeof(note))
		k = sizeof(note) - 1;
	iov[0] = (struct iovec){note, (size_t)k};
	iov[1] = (struct iovec){(void *)buf, len};
	/* A short write to stderr leaves nothing useful to do. */
	if (writev(STDERR_FILENO, iov, 2) < 0)
		return;
}

void sf__log_flush(void)
{
	if (log_dropped)
		sf__log_write("", 0);
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
	sf__log_write(line, (size_t)n);
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
