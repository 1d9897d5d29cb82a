/*
 * Test harness of the producer tests: writers of the pre-tokenized formats (so the tests
 * make their own corpora in a temporary directory), a config with every default, and a
 * run of the whole pipeline in the launcher's role: create the arena, fork P producers
 * running sf__producer_main(), fork one consumer process per local rank that claims its
 * steps through the slot protocol and records a hash of every batch and every row.
 */
#ifndef SF_TESTS_PRODUCER_HARNESS_H
#define SF_TESTS_PRODUCER_HARNESS_H

#include <stdint.h>

#include "common/config.h"

/* Writers: 0 or exit(1) with a message. */
void h_write_file(const char *path, const void *data, size_t len);
void h_write_nanogpt(const char *path, const uint16_t *tokens, size_t n);
void h_write_llmc(const char *path, const void *tokens, size_t n, int wide);
/* Megatron pair PREFIX.bin/.idx: `n_docs` documents of lengths `lens`, one sequence each. */
void h_write_megatron(const char *prefix, const void *tokens, const uint32_t *lens, size_t n_docs,
		      int wide);

/* A fresh temporary directory (removed by h_rmtree); DIR/cache becomes the index cache
 * directory ($SHMFEED_CACHE_DIR) of this process. */
char *h_tmpdir(void);
void h_rmtree(const char *dir);

/* Defaults, one source of one path, the given geometry. */
void h_config(struct sf_config *cfg, const char *path, uint32_t B, uint32_t T, uint32_t W);

/* What a pipeline run saw. */
struct h_run {
	uint32_t ranks;
	uint32_t batch;	    /* B */
	uint64_t steps;	    /* steps recorded per rank */
	uint64_t *hash;	    /* [rank][step]: hash of the payload, length, first_sample */
	uint64_t *rows;	    /* [rank][step][row]: hash of the row's tokens */
	uint64_t *first;    /* [rank][step]: first_sample */
	uint32_t *length;   /* [rank][step]: payload length */
	uint32_t *row_head; /* [rank][step][row]: first token of the row */
};

/*
 * h_pipeline - run the job of `cfg` with `producers` producer processes, consumers
 * reading steps [start, start + steps) of every local rank (seeking first when start >
 * 0). Stops early at an end marker (the rest of the record stays zero). Returns 0, or
 * -1 with a message on stderr.
 */
int h_pipeline(const struct sf_config *cfg, uint32_t producers, uint64_t start, uint64_t steps,
	       struct h_run *ret);
void h_run_free(struct h_run *r);

/*
 * h_expect_direct - check that every batch of `run` (steps start.. of each local rank) is
 * the one sf__builder_fill() builds for it in this process, and starts at its global
 * sample; exits with a message otherwise.
 */
void h_expect_direct(const struct sf_config *cfg, const struct h_run *run, uint64_t start);

/*
 * h_check_runs - the job of `cfg` with 1, 2 and 4 producers over `steps` steps gives the
 * same batches as each other and as the direct build, and a resume (2 producers) from
 * every step 1 .. steps-1 gives the uninterrupted run's; exits with a message otherwise.
 */
void h_check_runs(const char *name, const struct sf_config *cfg, uint64_t steps);

/* h_read_file - the bytes of the file at `path` (NUL-terminated, to free()), or NULL when
 * it cannot be opened; exits when it cannot be read. */
char *h_read_file(const char *path, size_t *ret_len);

struct sf_dataset;
struct sf_builder;

/*
 * h_builder - open the dataset of `cfg` into *ret_ds and a builder of it into *ret_b (exits
 * with a message on an error); returns a buffer of one payload, to free().
 */
unsigned char *h_builder(const struct sf_config *cfg, struct sf_dataset **ret_ds,
			 struct sf_builder **ret_b);

#define H_CHECK(cond, ...)                                                                         \
	do {                                                                                       \
		if (!(cond)) {                                                                     \
			fprintf(stderr, "%s:%d: check failed: %s: ", __FILE__, __LINE__, #cond);   \
			fprintf(stderr, __VA_ARGS__);                                              \
			fprintf(stderr, "\n");                                                     \
			exit(1);                                                                   \
		}                                                                                  \
	} while (0)

#endif
