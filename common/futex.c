/*
 * Thin wrappers over futex(2). FUTEX_WAIT takes a relative timeout.
 */
#include <errno.h>
#include <limits.h>
#include <linux/futex.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "common/futex.h"

int sf__futex_wait(_Atomic uint32_t *word, uint32_t expected, int64_t timeout_ns)
{
	struct timespec ts, *tsp = NULL;
	long r;

	if (timeout_ns >= 0) {
		ts.tv_sec = timeout_ns / 1000000000;
		ts.tv_nsec = timeout_ns % 1000000000;
		tsp = &ts;
	}
	r = syscall(SYS_futex, (uint32_t *)word, FUTEX_WAIT, expected, tsp, NULL, 0);
	return r < 0 ? -errno : 0;
}

_Atomic uint64_t sf__futex_wake_calls;

void sf__futex_wake(_Atomic uint32_t *word, int count)
{
	atomic_fetch_add_explicit(&sf__futex_wake_calls, 1, memory_order_relaxed);
	syscall(SYS_futex, (uint32_t *)word, FUTEX_WAKE, count, NULL, NULL, 0);
}
