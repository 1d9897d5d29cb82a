/*
 * Process identity from /proc. Used at attach and repair time only, never per batch.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "common/proc.h"

static int read_stat(pid_t pid, char *buf, size_t len)
{
	char path[64];
	ssize_t n;
	int fd;

	snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	n = read(fd, buf, len - 1);
	close(fd);
	if (n <= 0)
		return n < 0 ? -errno : -EIO;
	buf[n] = '\0';
	return 0;
}

/* Return a pointer to field `field` (1-based) of a stat line. The command name (field 2)
 * may hold spaces and parentheses, so counting starts after its last ')'. */
static const char *stat_field(const char *stat, int field, char *state)
{
	const char *p = strrchr(stat, ')');

	if (!p || p[1] != ' ')
		return NULL;
	p += 2; /* field 3 starts here */
	if (state)
		*state = *p;
	for (int f = 3; f < field; f++) {
		p = strchr(p, ' ');
		if (!p)
			return NULL;
		p++;
	}
	return p;
}

int sf__proc_starttime(pid_t pid, uint64_t *ret_starttime)
{
	char buf[1024];
	const char *p;
	int r;

	r = read_stat(pid, buf, sizeof(buf));
	if (r < 0)
		return r;
	p = stat_field(buf, 22, NULL);
	if (!p)
		return -EIO;
	*ret_starttime = strtoull(p, NULL, 10);
	return 0;
}

int sf__proc_alive(pid_t pid, uint64_t starttime)
{
	char buf[1024];
	const char *p, *threads;
	char state = 0;
	int r;

	if (pid <= 0)
		return 0;
	r = read_stat(pid, buf, sizeof(buf));
	/* Only "no such process" is a death, and only where this /proc shows processes at
	 * all; any other failure leaves it unknown, which counts as alive. */
	if (r == -ENOENT || r == -ESRCH)
		return access("/proc/self/stat", R_OK) == 0 ? 0 : 1;
	if (r < 0)
		return 1;
	p = stat_field(buf, 22, &state);
	threads = stat_field(buf, 20, NULL);
	if (!p || !threads)
		return 1;
	/* A zombie has exited and its slots can be repaired before it is reaped, unless
	 * it is a leader whose main thread called pthread_exit() while other threads run:
	 * its thread count stays above 1 until the last of them ends. */
	if ((state == 'Z' || state == 'X') && strtoul(threads, NULL, 10) <= 1)
		return 0;
	/* A start time that could not be read at registration tells nothing. */
	return starttime == 0 || strtoull(p, NULL, 10) == starttime;
}

uint64_t sf__now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

size_t sf__proc_children(pid_t parent, pid_t *out, size_t max)
{
	DIR *d = opendir("/proc");
	struct dirent *de;
	size_t n = 0;

	if (!d)
		return 0;
	while (n < max && (de = readdir(d))) {
		char buf[1024], *end;
		const char *p;
		long pid = strtol(de->d_name, &end, 10);

		if (*end || pid <= 0 || read_stat((pid_t)pid, buf, sizeof(buf)) < 0)
			continue;
		p = stat_field(buf, 4, NULL);
		if (p && strtol(p, NULL, 10) == (long)parent)
			out[n++] = (pid_t)pid;
	}
	closedir(d);
	return n;
}

void sf__children_waitable(void)
{
	struct sigaction sa = {.sa_handler = SIG_DFL};

	sigemptyset(&sa.sa_mask);
	sigaction(SIGCHLD, &sa, NULL);
}
