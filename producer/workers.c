/*
 * Forked workers for the embarrassingly parallel passes over raw text (see
 * producer/workers.h). The shared block holds the next-item counter, a stop flag and
 * each worker's first error; nothing else crosses between processes.
 */
#include <errno.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "shmfeed/shmfeed.h"
#include "producer/producer.h"
#include "producer/sigbus.h"
#include "producer/workers.h"

struct worker_error {
	uint64_t item;
	struct sf_err err;
};

struct shared_block {
	_Atomic uint64_t next;
	_Atomic uint32_t stop;
	uint32_t pad;
	struct worker_error errors[]; /* one per worker, item UINT64_MAX when none */
};

void *sf__shared_alloc(size_t bytes)
{
	void *p = mmap(NULL, bytes ? bytes : 1, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS,
		       -1, 0);

	return p == MAP_FAILED ? NULL : p;
}

void sf__shared_free(void *p, size_t bytes)
{
	if (p)
		munmap(p, bytes ? bytes : 1);
}

struct item_call {
	const struct sf_work *w;
	void *state;
	uint64_t i;
	struct sf_err *e;
};

static int run_item(void *arg)
{
	struct item_call *c = arg;

	return c->w->item(c->w->arg, c->state, c->i, c->e);
}

static void work_loop(const struct sf_work *w, struct shared_block *sb, uint32_t me)
{
	struct worker_error *we = &sb->errors[me];
	void *state = NULL;
	int r;

	r = w->init ? w->init(w->arg, &state, &we->err) : 0;
	if (r < 0) {
		we->item = 0;
		we->err.code = r;
		atomic_store_explicit(&sb->stop, 1, memory_order_relaxed);
		return;
	}
	/* Relaxed throughout: items are independent, and their results reach the parent
	 * through waitpid(), which orders everything the worker wrote before exiting. */
	while (!atomic_load_explicit(&sb->stop, memory_order_relaxed)) {
		uint64_t i = atomic_fetch_add_explicit(&sb->next, 1, memory_order_relaxed);

		if (i >= w->n_items)
			break;
		{
			struct item_call c = {w, state, i, &we->err};
			void *fault;

			r = sf__sigbus_call(run_item, &c, &fault, &we->err);
			if (fault)
				r = w->ds ? sf__dataset_fault(w->ds, fault, &we->err)
					  : sf__err(&we->err, -EFAULT, "SIGBUS at address %p",
						    fault);
		}
		if (r < 0) {
			we->item = i;
			we->err.code = r;
			atomic_store_explicit(&sb->stop, 1, memory_order_relaxed);
			break;
		}
	}
	if (w->fini)
		w->fini(w->arg, state);
}

int sf__work_run(const struct sf_work *w, struct sf_err *e)
{
	uint32_t n = w->n_workers ? w->n_workers : 1;
	size_t bytes = sizeof(struct shared_block) + n * sizeof(struct worker_error);
	struct shared_block *sb;
	pid_t *pids;
	uint32_t alive = 0;
	int r = 0, died = 0;

	if ((uint64_t)n > w->n_items)
		n = w->n_items ? (uint32_t)w->n_items : 1;
	sb = sf__shared_alloc(bytes);
	pids = calloc(n, sizeof(*pids));
	if (!sb || !pids) {
		sf__shared_free(sb, bytes);
		free(pids);
		return sf__err(e, -ENOMEM, "out of memory");
	}
	for (uint32_t i = 0; i < n; i++)
		sb->errors[i].item = UINT64_MAX;
	if (n == 1) {
		work_loop(w, sb, 0);
	} else {
		const pid_t caller = getpid();

		for (uint32_t i = 0; i < n; i++) {
			pid_t pid = fork();

			if (pid == 0) {
				/* A worker ends with its caller (a launcher killed while it builds
				 * the index), even one that died before this line. */
				if (prctl(PR_SET_PDEATHSIG, SIGKILL) < 0 || getppid() != caller)
					_exit(1);
				work_loop(w, sb, i);
				_exit(0);
			}
			if (pid < 0) {
				r = sf__err(e, -errno, "cannot fork a worker: %s", strerror(errno));
				atomic_store_explicit(&sb->stop, 1, memory_order_relaxed);
				break;
			}
			pids[i] = pid;
			alive++;
		}
		while (alive) {
			struct timespec ts = {0, 200 * 1000 * 1000};

			for (uint32_t i = 0; i < n; i++) {
				int status;

				if (!pids[i] || waitpid(pids[i], &status, WNOHANG) != pids[i])
					continue;
				pids[i] = 0;
				alive--;
				if (!WIFEXITED(status) || WEXITSTATUS(status)) {
					died = 1;
					atomic_store_explicit(&sb->stop, 1, memory_order_relaxed);
				}
			}
			if (alive) {
				if (w->progress)
					w->progress(w->arg);
				nanosleep(&ts, NULL);
			}
		}
	}
	if (r == 0) {
		const struct worker_error *first = NULL;

		for (uint32_t i = 0; i < n; i++)
			if (sb->errors[i].item != UINT64_MAX &&
			    (!first || sb->errors[i].item < first->item))
				first = &sb->errors[i];
		if (first) {
			*e = first->err;
			r = first->err.code;
		} else if (died) {
			r = sf__err(e, SF_E_SOURCE, "a tokenizing worker died");
		}
	}
	if (w->progress && r == 0)
		w->progress(w->arg);
	sf__shared_free(sb, bytes);
	free(pids);
	return r;
}
