/*
 * Unit tests of the forked workers (producer/workers.h) that the index build and
 * `shmfeed tokenize` run.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "producer/workers.h"

/* Store this worker's pid in slot i of `arg`, then take 30 s. */
static int item_sleeps(void *arg, void *state, uint64_t i, struct sf_err *e)
{
	(void)state;
	(void)e;
	atomic_store((atomic_int *)arg + i, (int)getpid());
	sleep(30);
	return 0;
}

/* Whether `pid` runs: not gone, nor a zombie (where nothing reaps orphans, as in a
 * container without an init, a dead worker stays one). */
static bool running(pid_t pid)
{
	char path[64], buf[256], *close_paren;
	FILE *f;
	size_t n;

	snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
	f = fopen(path, "r");
	if (!f)
		return false;
	n = fread(buf, 1, sizeof(buf) - 1, f);
	fclose(f);
	buf[n] = 0;
	close_paren = strrchr(buf, ')');
	return close_paren && close_paren[1] == ' ' && close_paren[2] != 'Z' &&
	       close_paren[2] != 'X';
}

/* Workers whose caller dies (a launcher killed during its index build) end with it: they
 * ran on as orphans for as long as their items took, minutes for a real corpus. */
Test(workers, workers_end_with_their_caller)
{
	atomic_int *pids = sf__shared_alloc(2 * sizeof(*pids));
	pid_t caller;
	int ms;

	cr_assert_not_null(pids);
	caller = fork();
	cr_assert_geq(caller, 0);
	if (caller == 0) {
		struct sf_work w = {.n_workers = 2, .n_items = 2, .arg = pids, .item = item_sleeps};
		struct sf_err e;

		_exit(sf__work_run(&w, &e) == 0 ? 0 : 1);
	}
	for (ms = 0; ms < 10000 && !(atomic_load(&pids[0]) && atomic_load(&pids[1])); ms += 10)
		usleep(10 * 1000);
	cr_assert(atomic_load(&pids[0]) && atomic_load(&pids[1]), "the workers never started");
	kill(caller, SIGKILL);
	waitpid(caller, NULL, 0);
	for (int i = 0; i < 2; i++) {
		pid_t pid = atomic_load(&pids[i]);

		for (ms = 0; ms < 5000 && running(pid); ms += 10)
			usleep(10 * 1000);
		cr_expect(!running(pid), "worker %d (pid %d) outlived its caller", i, (int)pid);
		if (running(pid))
			kill(pid, SIGKILL);
	}
	sf__shared_free(pids, 2 * sizeof(*pids));
}
