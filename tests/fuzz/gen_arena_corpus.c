/*
 * gen_arena_corpus: writes the committed corpus of fuzz_arena (tests/fuzz/corpus/arena/)
 * from this build's sf__arena_create(), so that the corpus follows the arena layout:
 * three valid headers and the 2 x 4 header with one lie each (see fuzz_arena.c). The
 * creator's pid is set to 1, its start time and the creation time to 0, so the files
 * depend on the layout alone. With --check it compares instead of writing and exits 1 on a
 * difference (a test runs it so: a layout change without a regenerated corpus fails).
 *
 * usage: gen_arena_corpus [--check] DIR
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "shmfeed/shmfeed.h"
#include "common/arena.h"

static struct sf_arena_header header_of(const struct sf_geometry *g)
{
	struct sf_arena_header h;
	struct sf_arena *a = NULL;
	struct sf_err e = {0};
	char job[64];

	snprintf(job, sizeof(job), "gen-corpus-%d", (int)getpid());
	sf__arena_unlink_job(job);
	if (sf__arena_create(job, g, NULL, &a, NULL, 0, &e) < 0) {
		fprintf(stderr, "gen_arena_corpus: %s\n", e.msg);
		exit(2);
	}
	memcpy(&h, a->hdr, sizeof(h));
	sf__arena_destroy(a);
	h.creator_uid = 0;
	h.creator_pid = 1;
	h.creator_starttime = 0;
	h.created_ns = 0;
	memset(h.job, 0, sizeof(h.job));
	memcpy(h.job, "seed", 4);
	return h;
}

/* Write (or with `check`, compare) one file; 0 when it is as it should be. */
static int emit(const char *dir, const char *name, const struct sf_arena_header *h, int check)
{
	char path[512], old[sizeof(*h) + 1];
	FILE *f;
	size_t n;

	snprintf(path, sizeof(path), "%s/%s", dir, name);
	f = fopen(path, check ? "rb" : "wb");
	if (!f) {
		fprintf(stderr, "gen_arena_corpus: cannot open %s\n", path);
		return 1;
	}
	if (check) {
		n = fread(old, 1, sizeof(old), f);
		fclose(f);
		if (n != sizeof(*h) || memcmp(old, h, sizeof(*h))) {
			fprintf(stderr,
				"gen_arena_corpus: %s is not what this build's arena layout "
				"writes: regenerate the corpus (gen_arena_corpus %s)\n",
				path, dir);
			return 1;
		}
		return 0;
	}
	n = fwrite(h, 1, sizeof(*h), f);
	return fclose(f) != 0 || n != sizeof(*h);
}

int main(int argc, char **argv)
{
	const struct sf_geometry g1 = {.ranks = 1,
				       .slots_per_rank = 1,
				       .batch = 1,
				       .seq_tokens = 2,
				       .token_bytes = 2,
				       .world_size = 1};
	const struct sf_geometry g2 = {.ranks = 2,
				       .slots_per_rank = 4,
				       .max_producers = 2,
				       .batch = 3,
				       .seq_tokens = 17,
				       .token_bytes = 2,
				       .world_size = 4,
				       .rank_base = 2,
				       .flags = SF_ARENA_F_CHECKSUM,
				       .config_digest = 0x1234,
				       .samples_per_epoch = 1000};
	const struct sf_geometry g3 = {.ranks = 3,
				       .slots_per_rank = 3,
				       .max_producers = 1,
				       .batch = 2,
				       .seq_tokens = 65,
				       .token_bytes = 4,
				       .doc_starts_per_seq = 4,
				       .world_size = 3,
				       .flags = SF_ARENA_F_CHECKSUM | SF_ARENA_F_DOC_STARTS};
	struct sf_arena_header base, h;
	int check = argc == 3 && !strcmp(argv[1], "--check"), bad = 0;
	const char *dir = argv[argc - 1];

	if (argc != 2 + check) {
		fprintf(stderr, "usage: gen_arena_corpus [--check] DIR\n");
		return 2;
	}
	h = header_of(&g1);
	bad |= emit(dir, "valid_1x1", &h, check);
	h = header_of(&g3);
	bad |= emit(dir, "valid_3x3_docstarts", &h, check);
	base = header_of(&g2);
	bad |= emit(dir, "valid_2x4_checksum", &base, check);
#define LIE(name, stmt)                                                                            \
	do {                                                                                       \
		h = base;                                                                          \
		stmt;                                                                              \
		bad |= emit(dir, name, &h, check);                                                 \
	} while (0)
	LIE("lie_ranks", (h.geo.ranks = 1000, h.geo.world_size = 1000));
	LIE("lie_slots_off", h.slots_off = UINT64_C(1) << 50);
	LIE("lie_payloads_off", h.payloads_off = h.total_size - 64);
	LIE("lie_producers", h.geo.max_producers = 100000);
	LIE("lie_token_bytes", h.geo.token_bytes = 0);
	LIE("lie_payload_overflow",
	    (h.geo.batch = UINT32_MAX, h.geo.seq_tokens = UINT32_MAX, h.geo.token_bytes = 4));
	LIE("lie_total_size", h.total_size = UINT64_C(1) << 62);
	LIE("lie_hugepages", h.geo.flags |= SF_ARENA_F_HUGEPAGES);
	LIE("lie_job_name", memset(h.job, 'x', sizeof(h.job)));
	LIE("lie_verify_every", h.verify_every = 0);
#undef LIE
	return bad;
}
