/*
 * `shmfeed tokenize`: the raw text token stream of a dataset written as a Megatron
 * MMIDIDX .bin/.idx pair (the format of megatron/core/datasets/indexed_dataset.py:
 * magic "MMIDIDX\0\0", version <Q 1, dtype code <B, sequence count <Q, document count
 * <Q, then int32 sequence lengths, int64 byte pointers and int64 document indices).
 * The chunk index gives every chunk's token offset and first document in advance, so
 * forked workers tokenize chunks in any order and write them in place with pwrite().
 */
#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "shmfeed/shmfeed.h"
#include "common/io.h"
#include "producer/dataset_impl.h"
#include "producer/text_cache.h"
#include "producer/text_index.h"
#include "producer/token_copy.h"
#include "producer/workers.h"

#define MEGATRON_INT32	4
#define MEGATRON_UINT16 8

struct write_counters {
	_Atomic uint64_t bytes;
	_Atomic uint64_t docs;
	_Atomic uint64_t tokens;
};

struct write_job {
	const struct sf_dataset *ds;
	int fd;
	const uint64_t *doc_first; /* first document of each chunk */
	uint32_t *doc_lens;	   /* shared: tokens of each document, <|endoftext|> included */
	struct write_counters *counters; /* shared */
	const char *bin_path;
	void (*progress)(const struct sf_tokenize_progress *p, void *arg);
	void *arg;
	uint64_t t0;
};

struct write_state {
	struct sf_text_cache *cache;
	unsigned char *out;
};

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static int write_init(void *arg, void **ret_state, struct sf_err *e)
{
	struct write_job *j = arg;
	struct write_state *s = calloc(1, sizeof(*s));
	int r;

	if (!s)
		return sf__err(e, -ENOMEM, "out of memory");
	s->out = malloc(j->ds->max_chunk_tokens * j->ds->token_bytes + 1);
	if (!s->out) {
		free(s);
		return sf__err(e, -ENOMEM, "out of memory");
	}
	r = sf__text_cache_create(j->ds, &s->cache, e);
	if (r < 0) {
		free(s->out);
		free(s);
		return r;
	}
	*ret_state = s;
	return 0;
}

static void write_fini(void *arg, void *state)
{
	struct write_state *s = state;

	(void)arg;
	sf__text_cache_free(s->cache);
	free(s->out);
	free(s);
}

static int write_item(void *arg, void *state, uint64_t i, struct sf_err *e)
{
	struct write_job *j = arg;
	struct write_state *s = state;
	const struct sf_chunk *ch = &j->ds->chunks[i];
	const uint32_t tb = j->ds->token_bytes;
	const uint32_t *ids;
	uint64_t n, n_docs;
	size_t bad;
	int r;

	r = sf__text_encode_chunk(s->cache, i, &ids, &n, j->doc_lens + j->doc_first[i], &n_docs, e);
	if (r < 0)
		return r;
	if (sf__copy_tokens(s->out, tb, ids, 4, n, &bad) < 0)
		return sf__err(e, SF_E_RANGE, "token %u does not fit uint16", ids[bad]);
	r = sf__pwrite_full(j->fd, s->out, n * tb, ch->start * tb);
	if (r < 0)
		return sf__err(e, r, "%s: cannot write: %s%s", j->bin_path, strerror(-r),
			       sf__fsize_hint(r));
	/* Relaxed: progress statistics only. */
	atomic_fetch_add_explicit(&j->counters->bytes, ch->len, memory_order_relaxed);
	atomic_fetch_add_explicit(&j->counters->docs, n_docs, memory_order_relaxed);
	atomic_fetch_add_explicit(&j->counters->tokens, n, memory_order_relaxed);
	return 0;
}

static void report(struct write_job *j, uint32_t done)
{
	struct sf_tokenize_progress p = {
		.bytes = atomic_load_explicit(&j->counters->bytes, memory_order_relaxed),
		.total_bytes = j->ds->stats.text_bytes,
		.docs = atomic_load_explicit(&j->counters->docs, memory_order_relaxed),
		.tokens = atomic_load_explicit(&j->counters->tokens, memory_order_relaxed),
		.elapsed_ns = now_ns() - j->t0,
		.done = done,
	};

	if (j->progress)
		j->progress(&p, j->arg);
}

static void write_progress(void *arg)
{
	report(arg, 0);
}

/* fwrite() of `n` bytes, keeping the first failure's errno in *err (0 so far). */
static void put(FILE *f, const void *p, size_t n, int *err)
{
	if (!*err && fwrite(p, 1, n, f) != n)
		*err = errno ? errno : EIO;
}

/* The .idx, written through stdio for its many small fields. */
static int write_index(const struct sf_dataset *ds, const char *path, const uint32_t *doc_lens,
		       uint64_t n_docs, struct sf_err *e)
{
	const int fd = sf__create_fresh(path);
	FILE *f = fd < 0 ? NULL : fdopen(fd, "wb");
	const unsigned char code = ds->token_bytes == 2 ? MEGATRON_UINT16 : MEGATRON_INT32;
	uint64_t v, ptr = 0;
	int err = 0;

	if (!f) {
		err = fd < 0 ? -fd : errno;
		if (fd >= 0)
			close(fd);
		return sf__err(e, -err, "%s: cannot create: %s", path, strerror(err));
	}
	errno = 0;
	put(f, "MMIDIDX\0\0", 9, &err);
	v = 1;
	put(f, &v, 8, &err);
	put(f, &code, 1, &err);
	put(f, &n_docs, 8, &err);
	v = n_docs + 1;
	put(f, &v, 8, &err);
	for (uint64_t d = 0; d < n_docs && !err; d++) {
		int32_t len = (int32_t)doc_lens[d];

		put(f, &len, 4, &err);
	}
	for (uint64_t d = 0; d < n_docs && !err; d++) {
		put(f, &ptr, 8, &err);
		ptr += (uint64_t)doc_lens[d] * ds->token_bytes;
	}
	for (v = 0; v <= n_docs && !err; v++)
		put(f, &v, 8, &err);
	if (!err && (fflush(f) != 0 || fsync(fileno(f)) != 0))
		err = errno ? errno : EIO;
	if (fclose(f) != 0 && !err)
		err = errno ? errno : EIO;
	if (err)
		return sf__err(e, -err, "%s: cannot write: %s%s", path, strerror(err),
			       sf__fsize_hint(err));
	return 0;
}

int sf__dataset_write_megatron(const struct sf_dataset *ds, const char *prefix, uint32_t workers,
			       void (*progress)(const struct sf_tokenize_progress *p, void *arg),
			       void *arg, struct sf_err *e)
{
	size_t plen = strlen(prefix) + 32;
	char *bin = malloc(plen), *idx = malloc(plen), *bin_tmp = malloc(plen),
	     *idx_tmp = malloc(plen);
	uint64_t *doc_first = calloc(ds->n_chunks + 1, sizeof(uint64_t));
	uint64_t n_docs = 0, lens_bytes;
	struct write_counters *counters = sf__shared_alloc(sizeof(*counters));
	uint32_t *doc_lens = NULL;
	struct write_job job = {.ds = ds, .fd = -1, .progress = progress, .arg = arg};
	const char *failed;
	int r = 0;

	if (!bin || !idx || !bin_tmp || !idx_tmp || !doc_first || !counters) {
		r = sf__err(e, -ENOMEM, "out of memory");
		goto out;
	}
	for (uint64_t c = 0; c < ds->n_chunks; c++) {
		doc_first[c] = n_docs;
		n_docs += ds->chunks[c].n_docs;
	}
	lens_bytes = (n_docs + 1) * sizeof(uint32_t);
	doc_lens = sf__shared_alloc(lens_bytes);
	if (!doc_lens) {
		r = sf__err(e, -ENOMEM, "out of memory");
		goto out;
	}
	snprintf(bin, plen, "%s.bin", prefix);
	snprintf(idx, plen, "%s.idx", prefix);
	snprintf(bin_tmp, plen, "%s.bin.tmp", prefix);
	snprintf(idx_tmp, plen, "%s.idx.tmp", prefix);
	job.fd = sf__create_fresh(bin_tmp);
	if (job.fd < 0) {
		r = sf__err(e, job.fd, "%s: cannot create: %s", bin_tmp, strerror(-job.fd));
		goto out;
	}
	if (ftruncate(job.fd, (off_t)(ds->n_tokens * ds->token_bytes)) < 0) {
		r = sf__err(e, -errno, "%s: cannot size: %s%s", bin_tmp, strerror(errno),
			    sf__fsize_hint(errno));
		goto out;
	}
	job.doc_first = doc_first;
	job.doc_lens = doc_lens;
	job.counters = counters;
	job.bin_path = bin_tmp;
	job.t0 = now_ns();
	{
		struct sf_work w = {.n_workers = workers,
				    .n_items = ds->n_chunks,
				    .arg = &job,
				    .init = write_init,
				    .item = write_item,
				    .fini = write_fini,
				    .progress = write_progress,
				    .ds = ds};

		r = sf__work_run(&w, e);
	}
	if (r < 0)
		goto out;
	if (fsync(job.fd) < 0) {
		r = sf__err(e, -errno, "%s: cannot write: %s%s", bin_tmp, strerror(errno),
			    sf__fsize_hint(errno));
		goto out;
	}
	r = write_index(ds, idx_tmp, doc_lens, n_docs, e);
	if (r < 0)
		goto out;
	r = sf__rename_pair(bin_tmp, bin, idx_tmp, idx, &failed);
	if (r < 0) {
		r = sf__err(e, r, "%s: cannot move the written pair into place: %s: %s", prefix,
			    failed, strerror(-r));
		goto out;
	}
	report(&job, 1);
out:
	if (job.fd >= 0)
		close(job.fd);
	if (r < 0 && bin_tmp && idx_tmp) {
		unlink(bin_tmp);
		unlink(idx_tmp);
	}
	sf__shared_free(doc_lens, doc_lens ? (n_docs + 1) * sizeof(uint32_t) : 0);
	sf__shared_free(counters, sizeof(*counters));
	free(doc_first);
	free(bin);
	free(idx);
	free(bin_tmp);
	free(idx_tmp);
	return r;
}
