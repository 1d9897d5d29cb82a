/*
 * The producer test harness (see harness.h). Consumers and producers are forked
 * processes, as in a real job; their records go through a MAP_SHARED mapping.
 */
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>
#include <xxhash.h>

#include "shmfeed/shmfeed.h"
#include "common/arena.h"
#include "common/slot.h"
#include "producer/producer.h"
#include "tests/producer/harness.h"

void h_write_file(const char *path, const void *data, size_t len)
{
	FILE *f = fopen(path, "wb");

	H_CHECK(f && fwrite(data, 1, len, f) == len && fclose(f) == 0, "cannot write %s", path);
}

void h_write_nanogpt(const char *path, const uint16_t *tokens, size_t n)
{
	h_write_file(path, tokens, n * 2);
}

void h_write_llmc(const char *path, const void *tokens, size_t n, int wide)
{
	/* As llm.c's write_datafile: gpt-2 is magic 20240520 v1, llama-3 20240801 v7. */
	int32_t hdr[256] = {wide ? 20240801 : 20240520, wide ? 7 : 1, (int32_t)n};
	FILE *f = fopen(path, "wb");

	H_CHECK(f && fwrite(hdr, sizeof(hdr), 1, f) == 1 &&
			fwrite(tokens, wide ? 4 : 2, n, f) == n && fclose(f) == 0,
		"cannot write %s", path);
}

void h_write_megatron(const char *prefix, const void *tokens, const uint32_t *lens, size_t n_docs,
		      int wide)
{
	char path[4096];
	size_t total = 0, width = wide ? 4 : 2;
	uint64_t v, ptr = 0;
	FILE *f;

	for (size_t i = 0; i < n_docs; i++)
		total += lens[i];
	snprintf(path, sizeof(path), "%s.bin", prefix);
	h_write_file(path, tokens, total * width);
	snprintf(path, sizeof(path), "%s.idx", prefix);
	f = fopen(path, "wb");
	H_CHECK(f, "cannot write %s", path);
	fwrite("MMIDIDX\0\0", 1, 9, f);
	v = 1;
	fwrite(&v, 8, 1, f);
	fputc(wide ? 4 : 8, f);
	v = n_docs;
	fwrite(&v, 8, 1, f);
	v = n_docs + 1;
	fwrite(&v, 8, 1, f);
	for (size_t i = 0; i < n_docs; i++) {
		int32_t l = (int32_t)lens[i];

		fwrite(&l, 4, 1, f);
	}
	for (size_t i = 0; i < n_docs; i++) {
		fwrite(&ptr, 8, 1, f);
		ptr += lens[i] * width;
	}
	for (uint64_t i = 0; i <= n_docs; i++)
		fwrite(&i, 8, 1, f);
	H_CHECK(fclose(f) == 0, "cannot write %s", path);
}

char *h_tmpdir(void)
{
	char tmpl[] = "/tmp/sf-prodtest-XXXXXX", cache[64];
	char *d = mkdtemp(tmpl);

	H_CHECK(d, "mkdtemp: %s", strerror(errno));
	/* Index caches of the corpora made here go with them, not to the user's cache. */
	snprintf(cache, sizeof(cache), "%s/cache", d);
	H_CHECK(setenv("SHMFEED_CACHE_DIR", cache, 1) == 0, "setenv");
	return strdup(d);
}

static int rm_one(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
	(void)sb;
	(void)flag;
	(void)ftw;
	return remove(path);
}

void h_rmtree(const char *dir)
{
	nftw(dir, rm_one, 16, FTW_DEPTH | FTW_PHYS);
}

void h_config(struct sf_config *cfg, const char *path, uint32_t B, uint32_t T, uint32_t W)
{
	static char *paths[1];
	static struct sf_source_config src;

	sf__config_defaults(cfg);
	paths[0] = (char *)path;
	memset(&src, 0, sizeof(src));
	src.paths = paths;
	src.n_paths = 1;
	cfg->sources = &src;
	cfg->n_sources = 1;
	cfg->batch_size = B;
	cfg->seq_len = T;
	cfg->world_size = W;
	cfg->local_ranks = W;
	cfg->slots_per_rank = 3;
}

static void consumer(struct sf_arena *a, uint32_t P, uint32_t r, uint64_t start, uint64_t steps,
		     struct h_run *run)
{
	const struct sf_geometry *g = &a->hdr->geo;
	const size_t row_bytes = (size_t)g->seq_tokens * g->token_bytes;
	uint32_t me = P + r;
	struct sf_err e = {0};

	if (sf__participant_register(a, me, SF_ROLE_CONSUMER, (int32_t)r, &e) < 0) {
		fprintf(stderr, "consumer %u: %s\n", r, e.msg);
		_exit(1);
	}
	if (start && sf__ring_seek(a, me, r, start) < 0)
		_exit(1);
	for (uint64_t s = 0; s < steps; s++) {
		struct sf_slot *slot;
		const unsigned char *p;
		uint64_t at = (uint64_t)r * steps + s;
		int rc = sf__consumer_claim(a, me, r, start + s, 30000000000ll, &slot);

		if (rc < 0) {
			fprintf(stderr, "consumer %u: step %llu: %s\n", r,
				(unsigned long long)(start + s), sf_strerror(rc));
			_exit(1);
		}
		p = sf__arena_payload(a, r, (uint32_t)((start + s) % g->slots_per_rank));
		run->first[at] = slot->first_sample;
		run->length[at] = slot->length;
		{
			uint64_t h[3] = {XXH3_64bits(p, slot->length), slot->length,
					 slot->first_sample};

			run->hash[at] = XXH3_64bits(h, sizeof(h));
		}
		for (uint32_t i = 0; slot->length && i < g->batch; i++) {
			const unsigned char *row = p + i * row_bytes;

			run->rows[at * g->batch + i] = XXH3_64bits(row, row_bytes);
			if (g->token_bytes == 2) {
				uint16_t v;

				memcpy(&v, row, 2);
				run->row_head[at * g->batch + i] = v;
			} else {
				memcpy(&run->row_head[at * g->batch + i], row, 4);
			}
		}
		if (slot->length == 0) {
			sf__consumer_release(a, r, slot);
			break;
		}
		sf__consumer_release(a, r, slot);
	}
	_exit(0);
}

static void *shared(size_t bytes)
{
	void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);

	H_CHECK(p != MAP_FAILED, "mmap");
	return p;
}

int h_pipeline(const struct sf_config *cfg, uint32_t P, uint64_t start, uint64_t steps,
	       struct h_run *run)
{
	static int serial;
	struct sf_dataset *ds = NULL;
	struct sf_arena *a = NULL;
	struct sf_geometry g;
	struct sf_err e = {0};
	struct sf_config c = *cfg;
	char job[64];
	pid_t *prod, *cons;
	int fail = 0;
	size_t n;

	c.producers = P;
	if (sf__dataset_open(&c, &ds, &e) < 0 || sf__dataset_geometry(ds, &c, &g, &e) < 0) {
		fprintf(stderr, "dataset: %s\n", e.msg);
		sf__dataset_close(ds);
		return -1;
	}
	snprintf(job, sizeof(job), "t-prod-%d-%d", (int)getpid(), serial++);
	sf__arena_unlink_job(job);
	if (sf__arena_create(job, &g, NULL, &a, NULL, 0, &e) < 0) {
		fprintf(stderr, "arena: %s\n", e.msg);
		sf__dataset_close(ds);
		return -1;
	}
	sf__arena_set_job_state(a, SF_JOB_RUNNING);
	run->ranks = g.ranks;
	run->batch = g.batch;
	run->steps = steps;
	n = (size_t)g.ranks * steps;
	run->hash = shared(n * 8);
	run->first = shared(n * 8);
	run->length = shared(n * 4);
	run->rows = shared(n * g.batch * 8);
	run->row_head = shared(n * g.batch * 4);
	prod = calloc(P, sizeof(*prod));
	cons = calloc(g.ranks, sizeof(*cons));
	for (uint32_t i = 0; i < P; i++) {
		prod[i] = fork();
		if (prod[i] == 0) {
			int r = sf__producer_main(ds, a, i, &e);

			if (r < 0)
				fprintf(stderr, "producer %u: %s\n", i, e.msg);
			_exit(r < 0);
		}
	}
	for (uint32_t r = 0; r < g.ranks; r++) {
		cons[r] = fork();
		if (cons[r] == 0)
			consumer(a, P, r, start, steps, run);
	}
	for (uint32_t r = 0; r < g.ranks; r++) {
		int st;

		waitpid(cons[r], &st, 0);
		if (!WIFEXITED(st) || WEXITSTATUS(st))
			fail = 1;
	}
	sf__arena_set_job_state(a, SF_JOB_STOPPING);
	for (uint32_t i = 0; i < P; i++) {
		int st;

		waitpid(prod[i], &st, 0);
		if (!WIFEXITED(st) || WEXITSTATUS(st))
			fail = 1;
	}
	free(prod);
	free(cons);
	sf__arena_destroy(a);
	sf__dataset_close(ds);
	return fail ? -1 : 0;
}

void h_run_free(struct h_run *r)
{
	size_t n = (size_t)r->ranks * r->steps;

	munmap(r->hash, n * 8);
	munmap(r->first, n * 8);
	munmap(r->length, n * 4);
	munmap(r->rows, n * 8 * r->batch);
	munmap(r->row_head, n * 4 * r->batch);
	memset(r, 0, sizeof(*r));
}

unsigned char *h_builder(const struct sf_config *cfg, struct sf_dataset **ret_ds,
			 struct sf_builder **ret_b)
{
	struct sf_err e = {0};
	unsigned char *buf;

	H_CHECK(sf__dataset_open(cfg, ret_ds, &e) == 0, "%s", e.msg);
	H_CHECK(sf__builder_create(*ret_ds, ret_b, &e) == 0, "%s", e.msg);
	buf = malloc(sf__dataset_payload_bytes(*ret_ds));
	H_CHECK(buf, "no memory for a payload");
	return buf;
}

void h_expect_direct(const struct sf_config *cfg, const struct h_run *run, uint64_t start)
{
	struct sf_dataset *ds;
	struct sf_builder *b;
	struct sf_err e = {0};
	unsigned char *buf = h_builder(cfg, &ds, &b);

	for (uint32_t r = 0; r < run->ranks; r++)
		for (uint64_t s = 0; s < run->steps; s++) {
			uint32_t len;
			uint64_t first, h[3];

			H_CHECK(sf__builder_fill(b, cfg->rank_base + r, start + s, buf, &len,
						 &first, &e) == 0,
				"%s", e.msg);
			h[0] = XXH3_64bits(buf, len);
			h[1] = len;
			h[2] = first;
			H_CHECK(XXH3_64bits(h, sizeof(h)) == run->hash[r * run->steps + s],
				"rank %u step %llu differs from the direct build", r,
				(unsigned long long)(start + s));
			H_CHECK(first == (start + s) * cfg->batch_size * cfg->world_size +
						 (uint64_t)(cfg->rank_base + r) * cfg->batch_size,
				"first sample of rank %u step %llu", r, (unsigned long long)s);
		}
	free(buf);
	sf__builder_free(b);
	sf__dataset_close(ds);
}

void h_check_runs(const char *name, const struct sf_config *cfg, uint64_t steps)
{
	struct h_run base, other;

	H_CHECK(h_pipeline(cfg, 1, 0, steps, &base) == 0, "%s: 1 producer", name);
	h_expect_direct(cfg, &base, 0);
	for (uint32_t p = 2; p <= 4; p += 2) {
		H_CHECK(h_pipeline(cfg, p, 0, steps, &other) == 0, "%s: %u producers", name, p);
		H_CHECK(!memcmp(base.hash, other.hash, base.ranks * steps * 8),
			"%s: %u producers differ from 1", name, p);
		h_run_free(&other);
	}
	for (uint64_t at = 1; at < steps; at++) {
		H_CHECK(h_pipeline(cfg, 2, at, steps - at, &other) == 0, "%s: resume", name);
		for (uint32_t r = 0; r < base.ranks; r++)
			H_CHECK(!memcmp(&base.hash[r * steps + at], &other.hash[r * (steps - at)],
					(steps - at) * 8),
				"%s: rank %u resumed at step %llu differs", name, r,
				(unsigned long long)at);
		h_run_free(&other);
	}
	h_run_free(&base);
	printf("ok: %s: 1, 2, 4 producers, the direct build and a resume from each of steps "
	       "1-%llu agree\n",
	       name, (unsigned long long)(steps - 1));
}

char *h_read_file(const char *path, size_t *ret_len)
{
	FILE *f = fopen(path, "rb");
	char *buf;
	long n;

	if (!f)
		return NULL;
	fseek(f, 0, SEEK_END);
	n = ftell(f);
	fseek(f, 0, SEEK_SET);
	buf = malloc((size_t)n + 1);
	H_CHECK(buf && fread(buf, 1, (size_t)n, f) == (size_t)n, "read %s", path);
	fclose(f);
	buf[n] = 0;
	*ret_len = (size_t)n;
	return buf;
}
