/*
 * A stand-in for the real producers, for the consumer's tests and benchmarks: it creates
 * a job's arena with a given geometry and forks producer processes that fill every slot
 * with a documented, deterministic function of the global sample index, so that a test
 * can recompute what any rank must receive at any step, whatever the node layout.
 *
 * Content of global sample k (row b of global rank g at step s is k = s*B*W + g*B + b):
 *   synthetic mode: token j (0 <= j <= T) = feed_mix(seed + k*GOLDEN + j*ODD) % vocab,
 *     with GOLDEN = 0x9E3779B97F4A7C15, ODD = 0xD1B54A32D192ED03 and feed_mix the
 *     splitmix64 finalizer;
 *   file mode (a headerless uint16 token file of n tokens, as nanoGPT writes): the window
 *     of T+1 tokens starting at feed_mix(seed + k*GOLDEN) % (n - T - 1) (widened when the
 *     arena holds int32 tokens).
 * Document starts, when asked for (D per sequence): the positions j with
 *   token % 61 == 0, the first D in ascending order, padded with UINT32_MAX.
 * A step s >= `steps` (when non-zero) is published empty: the end marker.
 * The config digest is an XXH3 of the fields that decide the global stream (seed, vocab,
 * T, B*W, token size, D, steps and the token file's name), so two layouts of the same
 * global batch agree on it.
 */
#ifndef SF_TESTS_FEED_H
#define SF_TESTS_FEED_H

#include <stdint.h>
#include <sys/types.h>

#include "common/arena.h"

#define FEED_GOLDEN  0x9E3779B97F4A7C15ull
#define FEED_ODD     0xD1B54A32D192ED03ull
#define FEED_DOC_MOD 61u

struct feed_options {
	const char *job;
	uint32_t ranks;		     /* local ranks of this node */
	uint32_t world_size;	     /* W (0: ranks) */
	uint32_t rank_base;	     /* global rank of local rank 0 */
	uint32_t batch;		     /* B */
	uint32_t seq_len;	     /* T */
	uint32_t slots_per_rank;     /* K */
	uint32_t producers;	     /* P */
	uint32_t token_bytes;	     /* 2 or 4 */
	uint32_t doc_starts_per_seq; /* D */
	uint32_t vocab;		     /* synthetic mode (0: 50257) */
	uint32_t checksum;	     /* 1: producers store xxh3 checksums */
	uint32_t verify_every;	     /* consumers verify every n-th step's checksum (0: 1) */
	uint64_t seed;
	uint64_t steps;		/* 0: unlimited */
	uint64_t samples_per_epoch; /* recorded in the geometry (the stream ignores it) */
	const char *token_file; /* NULL: synthetic tokens */
};

struct feed {
	struct feed_options opt;
	struct sf_geometry geo;
	struct sf_arena *arena;
	const uint16_t *file_tokens; /* mapped token file, or NULL */
	uint64_t file_ntokens;
	size_t file_map_size;
	pid_t pids[64];
};

/* feed_mix - the splitmix64 finalizer. */
uint64_t feed_mix(uint64_t z);

/*
 * feed_start - create the arena of o->job, set it RUNNING and fork o->producers
 * producers. Returns 0 and the feed in *ret (stop it with feed_stop()); or an error
 * with the message in `e`.
 */
int feed_start(const struct feed_options *o, struct feed **ret, struct sf_err *e);

/* feed_stop - STOPPING, wait for the producers, unlink the arena, free. */
void feed_stop(struct feed *f);

/*
 * feed_fill - write the payload of (global rank, step) into `payload` (payload_bytes of
 * the geometry); returns the payload length (0 for an end marker).
 */
uint32_t feed_fill(const struct feed *f, uint32_t global_rank, uint64_t step, void *payload);

/* feed_token_bytes - B * (T+1) * token size. */
uint64_t feed_token_bytes(const struct feed *f);

#endif
