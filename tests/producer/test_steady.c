/*
 * The producer loop allocates nothing in the steady state (invariant A1): malloc,
 * calloc, realloc and mmap are interposed and counted in two producer processes running
 * sf__producer_main() while this process consumes two epochs of batches; after each
 * producer's first WARMUP batches, every batch it builds must make 0 allocations. Run
 * over a pre-tokenized nanoGPT file, and over raw text (tinyshakespeare paragraphs,
 * r50k_base, document starts on) and a mixture of two raw text sources (its paragraphs,
 * its lines) and the nanoGPT file when ../shared/data is there.
 *
 * The rule this checks: everything a producer needs is allocated before its first
 * batch, including its tokenizer encoder, which is warmed up on a document as long as the
 * longest one of the sources (producer/text_cache.c). Warm-up batches only fault in
 * pages and fill caches.
 *
 * A plain program (exit 0 pass, 1 fail, 77 skip): the sanitizers interpose the allocator
 * themselves, so under them the count cannot be taken and the test skips.
 */
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include "shmfeed/shmfeed.h"
#include "common/arena.h"
#include "common/slot.h"
#include "producer/producer.h"
#include "tests/alloc_count.h"
#include "tests/producer/harness.h"

#ifdef SANITIZED
int main(void)
{
	printf("skip: the sanitizer owns the allocator, allocations cannot be counted\n");
	return 77;
}
#else

#define P      2u
#define WARMUP 3u

/* What each producer saw, in shared memory. */
struct counts {
	_Atomic uint64_t batches; /* published, warm-up included */
	_Atomic uint64_t allocs;  /* allocations since the end of the warm-up */
	_Atomic uint64_t worst;	  /* most allocations between two publishes after it */
	_Atomic uint64_t counted; /* batches counted */
};

static struct counts *counts;
static uint32_t me; /* in a producer: its index */
static unsigned long at_last_publish;
static char job[64];
static pid_t parent;

/* A failed check exits: the arena must not outlive the test (the producers die with
 * it, by PR_SET_PDEATHSIG). */
static void unlink_job(void)
{
	if (getpid() == parent && job[0])
		sf__arena_unlink_job(job);
}

/* Called in a producer after each publish. */
static void on_point(int point)
{
	struct counts *c = &counts[me];
	unsigned long allocations;
	uint64_t n;

	if (point != SF_TP_PRODUCER_PUBLISHED)
		return;
	n = atomic_fetch_add(&c->batches, 1) + 1;
	if (n == WARMUP) {
		alloc_count_reset();
		at_last_publish = 0;
		return;
	}
	if (n < WARMUP)
		return;
	allocations = alloc_count();
	if (allocations - at_last_publish > atomic_load(&c->worst))
		atomic_store(&c->worst, allocations - at_last_publish);
	at_last_publish = allocations;
	atomic_store(&c->allocs, allocations);
	atomic_fetch_add(&c->counted, 1);
}

/* Run `cfg` with P producers while consuming `epochs` epochs of every rank. */
static void run(const char *name, const struct sf_config *cfg, uint64_t epochs)
{
	struct sf_dataset *ds;
	struct sf_dataset_stats st;
	struct sf_geometry g;
	struct sf_arena *a;
	struct sf_err e = {0};
	pid_t prod[P];
	uint64_t steps;
	int status;

	memset(counts, 0, P * sizeof(*counts));
	H_CHECK(sf__dataset_open(cfg, &ds, &e) == 0, "%s", e.msg);
	H_CHECK(sf__dataset_geometry(ds, cfg, &g, &e) == 0, "%s", e.msg);
	sf__dataset_stats(ds, &st);
	H_CHECK(g.samples_per_epoch == st.n_windows, "the arena records %llu samples an epoch",
		(unsigned long long)g.samples_per_epoch);
	steps = epochs * st.n_windows / ((uint64_t)cfg->batch_size * cfg->world_size);
	snprintf(job, sizeof(job), "test-psteady-%d", (int)getpid());
	H_CHECK(sf__arena_create(job, &g, NULL, &a, NULL, 0, &e) == 0, "%s", e.msg);
	sf__arena_set_job_state(a, SF_JOB_RUNNING);
	for (uint32_t i = 0; i < P; i++) {
		prod[i] = fork();
		H_CHECK(prod[i] >= 0, "fork");
		if (prod[i] == 0) {
			if (prctl(PR_SET_PDEATHSIG, SIGKILL) < 0 || getppid() != parent)
				_exit(9);
			me = i;
			sf__test_hook = on_point;
			_exit(sf__producer_main(ds, a, i, &e) < 0);
		}
	}
	for (uint32_t r = 0; r < cfg->local_ranks; r++)
		H_CHECK(sf__participant_register(a, P + r, SF_ROLE_CONSUMER, (int32_t)r, &e) >= 0,
			"%s", e.msg);
	for (uint64_t s = 0; s < steps; s++)
		for (uint32_t r = 0; r < cfg->local_ranks; r++) {
			struct sf_slot *slot;

			H_CHECK(sf__consumer_claim(a, P + r, r, s, 30ll * 1000000000, &slot) == 0,
				"%s: rank %u step %llu not delivered", name, r,
				(unsigned long long)s);
			sf__consumer_release(a, r, slot);
		}
	sf__arena_set_job_state(a, SF_JOB_STOPPING);
	for (uint32_t i = 0; i < P; i++) {
		H_CHECK(waitpid(prod[i], &status, 0) == prod[i], "waitpid");
		H_CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0, "%s: producer %u failed",
			name, i);
	}
	/* The claim order is a race: one producer may take nearly every batch. */
	H_CHECK(atomic_load(&counts[0].counted) + atomic_load(&counts[1].counted) > 50,
		"%s: only %llu + %llu batches counted", name,
		(unsigned long long)atomic_load(&counts[0].counted),
		(unsigned long long)atomic_load(&counts[1].counted));
	for (uint32_t i = 0; i < P; i++) {
		struct counts *c = &counts[i];

		H_CHECK(atomic_load(&c->allocs) == 0,
			"%s: producer %u made %llu allocations in %llu batches (at most %llu in "
			"one)",
			name, i, (unsigned long long)atomic_load(&c->allocs),
			(unsigned long long)atomic_load(&c->counted),
			(unsigned long long)atomic_load(&c->worst));
	}
	printf("ok: %s: %llu + %llu batches after warm-up, 0 allocations\n", name,
	       (unsigned long long)atomic_load(&counts[0].counted),
	       (unsigned long long)atomic_load(&counts[1].counted));
	sf__arena_destroy(a);
	job[0] = 0;
	sf__dataset_close(ds);
}

int main(int argc, char **argv)
{
	char *dir, path[4096], vocab_dir[4096], corpus[4096];
	struct sf_config cfg;
	const char *what;
	uint16_t *tokens;
	FILE *f;

	setvbuf(stdout, NULL, _IOLBF, 0);
	/* The interposition must count, or a pass would mean nothing. */
	what = alloc_count_self_check();
	H_CHECK(!what, "%s is not interposed", what);

	parent = getpid();
	atexit(unlink_job);
	counts = mmap(NULL, P * sizeof(*counts), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS,
		      -1, 0);
	H_CHECK(counts != MAP_FAILED, "mmap");
	dir = h_tmpdir();

	tokens = malloc(200000 * sizeof(*tokens));
	for (uint32_t i = 0; i < 200000; i++)
		tokens[i] = (uint16_t)(i * 7919u % 50000u);
	snprintf(path, sizeof(path), "%s/tokens.bin", dir);
	h_write_nanogpt(path, tokens, 200000);
	free(tokens);
	h_config(&cfg, path, 8, 256, 2);
	cfg.slots_per_rank = 4;
	cfg.producers = P;
	run("pre-tokenized windows", &cfg, 2);

	snprintf(corpus, sizeof(corpus), "%s/corpus/tinyshakespeare.txt",
		 argc > 1 ? argv[1] : "../shared/data");
	snprintf(vocab_dir, sizeof(vocab_dir), "%s/vocab", argc > 1 ? argv[1] : "../shared/data");
	f = fopen(corpus, "rb");
	if (!f) {
		printf("skip: raw text (%s not found)\n", corpus);
	} else {
		static struct sf_source_config src;
		static char *paths[1];
		char *text = malloc(1 << 22);
		size_t n = fread(text, 1, 1 << 22, f);

		/* A copy, so that the chunk index is cached in the temporary directory. */
		fclose(f);
		snprintf(path, sizeof(path), "%s/paras.txt", dir);
		h_write_file(path, text, n);
		free(text);
		h_config(&cfg, path, 8, 256, 2);
		cfg.slots_per_rank = 4;
		cfg.producers = P;
		cfg.encoding = "r50k_base";
		cfg.vocab_dir = vocab_dir;
		cfg.doc_starts = 8;
		/* Paragraphs: documents of every length, the longest not the first. */
		src = cfg.sources[0];
		src.separator = "\n\n";
		paths[0] = path;
		src.paths = paths;
		cfg.sources = &src;
		run("raw text", &cfg, 2);
		{
			static struct sf_source_config mix[3];
			static char *tokens_path[1];

			/* Not in `path`, which the raw text sources' paths point at. */
			tokens_path[0] = malloc(strlen(dir) + sizeof("/tokens.bin"));
			H_CHECK(tokens_path[0], "malloc");
			sprintf(tokens_path[0], "%s/tokens.bin", dir);
			mix[0] = src;
			mix[0].name = "paragraphs";
			mix[0].weight = 500000000;
			mix[1] = src;
			mix[1].name = "lines";
			mix[1].separator = "\n";
			mix[1].weight = 300000000;
			mix[2] = src;
			mix[2].name = "tokens";
			mix[2].separator = NULL;
			mix[2].paths = tokens_path;
			mix[2].weight = 200000000;
			cfg.sources = mix;
			cfg.n_sources = 3;
			cfg.mixture = 1;
			run("mixture of two raw text sources and a pre-tokenized one", &cfg, 2);
			free(tokens_path[0]);
		}
	}
	h_rmtree(dir);
	free(dir);
	return 0;
}
#endif
