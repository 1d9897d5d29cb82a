/*
 * The seed corpus of fuzz_arena (tests/fuzz/corpus/arena/): arena headers written by
 * sf__arena_create() for a few geometries, with the creator's pid, start time and
 * creation time zeroed, and copies of one of them with one lie each.
 *
 *   gen_arena_corpus DIR          write the files into DIR
 *   gen_arena_corpus --check DIR  exit 1 unless DIR holds exactly these bytes
 *
 * The default suite runs --check on the committed corpus, so a change of the header
 * (a layout version, a field) fails until the corpus is written again, and the replay
 * never silently degrades to exercising the version refusal only.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/arena.h"

struct seed {
	const char *name;
	struct sf_geometry geo;
	uint64_t node_ranks; /* stored after creation when non-zero */
};

/* Two ranks of a four-rank job whose base is found at run time; it stands twice, with the
 * node's ranks unknown and known. */
#define GEO_2X2_AUTO                                                                               \
	{                                                                                          \
		.ranks = 2, .slots_per_rank = 2, .max_producers = 1, .batch = 2, .seq_tokens = 9,  \
		.token_bytes = 2, .world_size = 4, .flags = SF_ARENA_F_RANK_AUTO                   \
	}

static const struct seed seeds[] = {
	{"valid_1x1",
	 {.ranks = 1,
	  .slots_per_rank = 1,
	  .max_producers = 1,
	  .batch = 1,
	  .seq_tokens = 2,
	  .token_bytes = 2,
	  .world_size = 1},
	 0},
	{"valid_2x4_checksum",
	 {.ranks = 2,
	  .slots_per_rank = 4,
	  .max_producers = 2,
	  .batch = 2,
	  .seq_tokens = 17,
	  .token_bytes = 2,
	  .world_size = 4,
	  .rank_base = 2,
	  .flags = SF_ARENA_F_CHECKSUM,
	  .config_digest = 0x1234,
	  .samples_per_epoch = 1000},
	 0},
	{"valid_3x3_docstarts",
	 {.ranks = 3,
	  .slots_per_rank = 3,
	  .max_producers = 1,
	  .batch = 4,
	  .seq_tokens = 65,
	  .token_bytes = 4,
	  .doc_starts_per_seq = 4,
	  .world_size = 3,
	  .flags = SF_ARENA_F_DOC_STARTS},
	 0},
	{"valid_2x2_auto", GEO_2X2_AUTO, 0},
	{"valid_2x2_auto_known", GEO_2X2_AUTO, (UINT64_C(3) << 32) | 3},
};

/* The lies, each applied to a copy of valid_2x4_checksum (or valid_2x2_auto). */
static void lie_ranks(struct sf_arena_header *h)
{
	h->geo.ranks = 1000;
}
static void lie_slots_off(struct sf_arena_header *h)
{
	h->slots_off = UINT64_C(1) << 50;
}
static void lie_payloads_off(struct sf_arena_header *h)
{
	h->payloads_off = h->total_size - 1;
}
static void lie_producers(struct sf_arena_header *h)
{
	h->geo.max_producers = 100000;
}
static void lie_token_bytes(struct sf_arena_header *h)
{
	h->geo.token_bytes = 0;
}
static void lie_payload_overflow(struct sf_arena_header *h)
{
	h->geo.batch = UINT32_MAX;
	h->geo.seq_tokens = UINT32_MAX;
	h->geo.token_bytes = 4;
}
static void lie_total_size(struct sf_arena_header *h)
{
	h->total_size = UINT64_C(1) << 62;
}
static void lie_hugepages(struct sf_arena_header *h)
{
	h->geo.flags |= SF_ARENA_F_HUGEPAGES;
}
static void lie_job_name(struct sf_arena_header *h)
{
	memset(h->job, 'j', sizeof(h->job));
}
static void lie_verify_every(struct sf_arena_header *h)
{
	h->verify_every = 0;
}

static void lie_node_ranks_range(struct sf_arena_header *h)
{
	atomic_store_explicit(&h->node_ranks, sf__node_ranks_word(1, 3, 1), memory_order_relaxed);
}
static void lie_node_ranks_static_unknown(struct sf_arena_header *h)
{
	atomic_store_explicit(&h->node_ranks, 0, memory_order_relaxed);
}
static void lie_node_ranks_static_other(struct sf_arena_header *h)
{
	atomic_store_explicit(&h->node_ranks, sf__node_ranks_word(1, 0, 1), memory_order_relaxed);
}
static void lie_auto_geometry_base(struct sf_arena_header *h)
{
	h->geo.rank_base = 2; /* an automatic base has none in its geometry */
}

static const struct lie {
	const char *name;
	void (*apply)(struct sf_arena_header *h);
} lies[] = {
	{"lie_ranks", lie_ranks},
	{"lie_slots_off", lie_slots_off},
	{"lie_payloads_off", lie_payloads_off},
	{"lie_producers", lie_producers},
	{"lie_token_bytes", lie_token_bytes},
	{"lie_payload_overflow", lie_payload_overflow},
	{"lie_total_size", lie_total_size},
	{"lie_hugepages", lie_hugepages},
	{"lie_job_name", lie_job_name},
	{"lie_verify_every", lie_verify_every},
	{"lie_node_ranks_range", lie_node_ranks_range},
	{"lie_node_ranks_static_unknown", lie_node_ranks_static_unknown},
	{"lie_node_ranks_static_other", lie_node_ranks_static_other},
	{"lie_auto_geometry_base", lie_auto_geometry_base},
};

/* Write `h` as DIR/name, or compare it with that file; 0 when written or equal. */
static int emit(const char *dir, const char *name, const struct sf_arena_header *h, int check)
{
	char path[1024];
	unsigned char buf[sizeof(*h) + 1];
	size_t n;
	FILE *f;

	snprintf(path, sizeof(path), "%s/%s", dir, name);
	f = fopen(path, check ? "rb" : "wb");
	if (!f) {
		perror(path);
		return 1;
	}
	if (!check) {
		n = fwrite(h, 1, sizeof(*h), f);
		return (fclose(f) != 0 || n != sizeof(*h)) ? 1 : 0;
	}
	n = fread(buf, 1, sizeof(buf), f);
	fclose(f);
	if (n != sizeof(*h) || memcmp(buf, h, sizeof(*h))) {
		fprintf(stderr,
			"%s differs from what this build writes: run gen_arena_corpus %s to "
			"write the corpus again\n",
			path, dir);
		return 1;
	}
	return 0;
}

/* The header sf__arena_create() writes for `s`, with the per-run fields zeroed. */
static int make(const struct seed *s, struct sf_arena_header *ret)
{
	char job[64];
	struct sf_err e = {0};
	struct sf_arena *a = NULL;
	int r;

	snprintf(job, sizeof(job), "fuzzcorpus-%d", (int)getpid());
	r = sf__arena_create(job, &s->geo, NULL, &a, NULL, 0, &e);
	if (r < 0) {
		fprintf(stderr, "%s: %s\n", s->name, e.msg);
		return r;
	}
	memcpy(ret, a->hdr, sizeof(*ret));
	sf__arena_destroy(a);
	ret->creator_pid = 0;
	ret->creator_starttime = 0;
	ret->created_ns = 0;
	memset(ret->job, 0, sizeof(ret->job));
	snprintf(ret->job, sizeof(ret->job), "fuzzcorpus");
	if (s->node_ranks)
		atomic_store_explicit(&ret->node_ranks, s->node_ranks, memory_order_relaxed);
	return 0;
}

int main(int argc, char **argv)
{
	struct sf_arena_header h[sizeof(seeds) / sizeof(seeds[0])];
	int check = argc == 3 && !strcmp(argv[1], "--check"), bad = 0;
	const char *dir = argv[argc - 1];

	if (argc != 2 && !check) {
		fprintf(stderr, "usage: gen_arena_corpus [--check] DIR\n");
		return 2;
	}
	for (size_t i = 0; i < sizeof(seeds) / sizeof(seeds[0]); i++) {
		if (make(&seeds[i], &h[i]) < 0)
			return 1;
		bad |= emit(dir, seeds[i].name, &h[i], check);
	}
	for (size_t i = 0; i < sizeof(lies) / sizeof(lies[0]); i++) {
		/* The automatic-base lie starts from the automatic seed, the others from the
		 * static 2 x 4 one. */
		struct sf_arena_header l = h[i == sizeof(lies) / sizeof(lies[0]) - 1 ? 3 : 1];

		lies[i].apply(&l);
		bad |= emit(dir, lies[i].name, &l, check);
	}
	return bad;
}
