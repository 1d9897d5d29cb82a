/*
 * Run a numbered list of independent items on N forked worker processes: the index
 * build and `shmfeed tokenize` tokenize chunks this way. Workers take items in order
 * from a shared counter, so the earliest failing item is the one reported. Results go
 * to memory the caller mapped MAP_SHARED before the call. Workers are killed (SIGKILL)
 * when their caller dies.
 *
 * Caveat: fork() copies only the calling thread; call this before starting threads
 * (the launcher opens the dataset before it starts its control thread).
 */
#ifndef SF_PRODUCER_WORKERS_H
#define SF_PRODUCER_WORKERS_H

#include <stdint.h>

#include "common/errors.h"

struct sf_dataset;

struct sf_work {
	uint32_t n_workers;
	uint64_t n_items;
	void *arg;
	/* In each worker, before its first item: per-worker state in *ret_state. */
	int (*init)(void *arg, void **ret_state, struct sf_err *e);
	/* One item; a negative return stops every worker and is reported. */
	int (*item)(void *arg, void *state, uint64_t i, struct sf_err *e);
	void (*fini)(void *arg, void *state);
	/* In the caller, about every 200 ms while the workers run (may be NULL). */
	void (*progress)(void *arg);
	/* The dataset whose mapped files the items read: a SIGBUS in an item (a file
	 * truncated under the run) is its error naming the file and offset. */
	const struct sf_dataset *ds;
};

/*
 * sf__work_run - run every item. With one worker the items run in the calling process.
 * Returns 0, the error of the earliest failing item (its message in `e`), or
 * SF_E_SOURCE when a worker died.
 */
int sf__work_run(const struct sf_work *w, struct sf_err *e);

/* sf__shared_alloc - zeroed MAP_SHARED anonymous memory that forked workers write. */
void *sf__shared_alloc(size_t bytes);

/* sf__shared_free - unmap what sf__shared_alloc() returned; accepts NULL. */
void sf__shared_free(void *p, size_t bytes);

#endif
