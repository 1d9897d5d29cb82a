/*
 * Fuzz target: the cached chunk index of raw text (producer/index_file.c), as anyone who
 * can write the cache directory (or, with `index: beside`, the corpus directory) could
 * forge it. A checksum and the file's identity guard the index, so random bytes would
 * only exercise the first check; instead the input patches a valid index: records of a
 * 2-byte offset, a 1-byte operation (bit 0: add instead of set) and an 8-byte value, each
 * applied to the 64-bit field at that offset, then the checksum is made valid again. The
 * dataset is opened with the forged index and, when it opens, every batch of an epoch is
 * built: any outcome is fine but a crash, a sanitizer report, or a batch built from a
 * lying index without an error (the target checks each batch against the batch built
 * from the honest index).
 *
 * The corpus (three JSONL files of 64, 128 and 192 KiB, each ending with a chunk too short
 * for a window to start in it) is made on first use in
 * a temporary directory that is removed at exit.
 */
#include <glob.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <xxhash.h>

#include "shmfeed/shmfeed.h"
#include "producer/producer.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static char dir[64], corpus[128], ipath[256];
static char *paths[1];
static struct sf_source_config src;
static struct sf_config cfg;
static unsigned char *honest; /* the valid index */
static size_t honest_len;
static uint64_t *honest_batches; /* hash of each batch built from it */
static uint64_t n_steps;

static void rm_dir(void)
{
	char cmd[128];

	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
	if (dir[0] && system(cmd) != 0)
		fprintf(stderr, "fuzz_index: cannot remove %s\n", dir);
}

/* A failure (or a finding) leaves no corpus behind: abort() skips atexit(). */
static void die(void)
{
	rm_dir();
	abort();
}

/* Every batch of rank 0 of the first epoch: 0 and their hashes, or the first error. */
static int build_all(struct sf_dataset *ds, uint64_t *hashes, uint64_t steps)
{
	struct sf_builder *b = NULL;
	struct sf_err e = {0};
	void *payload = malloc(sf__dataset_payload_bytes(ds));
	int r = payload ? sf__builder_create(ds, &b, &e) : -1;

	for (uint64_t s = 0; r == 0 && s < steps; s++) {
		uint32_t len;
		uint64_t first;

		r = sf__builder_fill(b, 0, s, payload, &len, &first, &e);
		if (r == 0)
			hashes[s] = XXH3_64bits(payload, len);
	}
	sf__builder_free(b);
	free(payload);
	return r;
}

static void setup(void)
{
	struct sf_dataset *ds = NULL;
	struct sf_dataset_stats st;
	struct sf_err e = {0};
	char cache[128];
	glob_t g;
	FILE *f;

	snprintf(dir, sizeof(dir), "/tmp/sf-fuzzidx-XXXXXX");
	if (!mkdtemp(dir))
		abort();
	atexit(rm_dir);
	snprintf(cache, sizeof(cache), "%s/cache", dir);
	setenv("SHMFEED_CACHE_DIR", cache, 1);
	snprintf(corpus, sizeof(corpus), "%s/t", dir);
	mkdir(corpus, 0700);
	for (int i = 0; i < 3; i++) {
		char path[192];

		snprintf(path, sizeof(path), "%s/%c.jsonl", corpus, 'a' + i);
		f = fopen(path, "w");
		if (!f)
			die();
		/* Whole documents past (i + 1) x 64 KiB, then a short one: each file ends with
		 * a chunk of fewer than T tokens, where no window starts. */
		for (int d = 0; ftell(f) < 65536L * (i + 1); d++)
			fprintf(f, "{\"text\": \"file %d doc %d %.*s\"}\n", i, d,
				40 + (d * 37) % 300,
				"lorem ipsum dolor sit amet consectetur adipiscing elit sed do "
				"eiusmod tempor incididunt ut labore et dolore magna aliqua ut "
				"enim "
				"ad minim veniam quis nostrud exercitation ullamco laboris nisi ut "
				"aliquip ex ea commodo consequat duis aute irure dolor in "
				"reprehenderit in voluptate velit esse cillum dolore eu fugiat "
				"nulla "
				"pariatur excepteur sint occaecat cupidatat non proident sunt in");
		fprintf(f, "{\"text\": \"the end of file %d\"}\n", i);
		fclose(f);
	}
	sf__config_defaults(&cfg);
	paths[0] = corpus;
	src.paths = paths;
	src.n_paths = 1;
	cfg.sources = &src;
	cfg.n_sources = 1;
	cfg.encoding = "bytes";
	cfg.batch_size = 2;
	cfg.seq_len = 256;
	cfg.world_size = 1;
	cfg.local_ranks = 1;
	cfg.producers = 1;
	cfg.epochs = 1;
	if (sf__dataset_open(&cfg, &ds, &e) < 0)
		die();
	sf__dataset_stats(ds, &st);
	n_steps = st.n_steps;
	honest_batches = calloc(n_steps + 1, sizeof(*honest_batches));
	if (!honest_batches || build_all(ds, honest_batches, n_steps) != 0)
		die();
	sf__dataset_close(ds);
	snprintf(cache, sizeof(cache), "%s/cache/index/*.sfidx", dir);
	if (glob(cache, 0, NULL, &g) != 0 || g.gl_pathc != 1)
		die();
	snprintf(ipath, sizeof(ipath), "%s", g.gl_pathv[0]);
	globfree(&g);
	f = fopen(ipath, "rb");
	if (!f)
		die();
	fseek(f, 0, SEEK_END);
	honest_len = (size_t)ftell(f);
	fseek(f, 0, SEEK_SET);
	honest = malloc(honest_len);
	if (!honest || fread(honest, 1, honest_len, f) != honest_len)
		die();
	fclose(f);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct sf_dataset *ds = NULL;
	struct sf_err e = {0};
	unsigned char *forged;
	uint64_t sum;
	FILE *f;

	if (!honest)
		setup();
	forged = malloc(honest_len);
	if (!forged)
		die();
	memcpy(forged, honest, honest_len);
	for (size_t i = 0; i + 11 <= size; i += 11) {
		uint16_t at;
		uint64_t v, old;

		memcpy(&at, data + i, 2);
		memcpy(&v, data + i + 3, 8);
		at = (uint16_t)(at % (honest_len - 8 - 7));
		memcpy(&old, forged + at, 8);
		v = data[i + 2] & 1 ? old + v : v;
		memcpy(forged + at, &v, 8);
	}
	sum = XXH3_64bits(forged, honest_len - 8);
	memcpy(forged + honest_len - 8, &sum, 8);
	f = fopen(ipath, "wb");
	if (!f || fwrite(forged, 1, honest_len, f) != honest_len || fclose(f) != 0)
		die();
	if (sf__dataset_open(&cfg, &ds, &e) == 0) {
		struct sf_dataset_stats st;

		sf__dataset_stats(ds, &st);
		/* An index that opened and built every batch of its epoch without an error told
		 * the truth, or a harmless part of it changed: the batches are the honest ones,
		 * as many. (An epoch of another length counts: a chunk said too short for a
		 * window dropped its tokens from the stream, without an error.) */
		if (st.index_loaded && st.n_steps <= 4 * n_steps) {
			uint64_t *got = calloc(st.n_steps + 1, sizeof(*got));

			if (!got)
				die();
			if (build_all(ds, got, st.n_steps) == 0 &&
			    (st.n_steps != n_steps ||
			     memcmp(got, honest_batches, n_steps * sizeof(*got)))) {
				fprintf(stderr,
					"fuzz_index: a forged index gave other batches (%llu "
					"steps, "
					"%llu honest)\n",
					(unsigned long long)st.n_steps,
					(unsigned long long)n_steps);
				die();
			}
			free(got);
		}
		sf__dataset_close(ds);
	}
	free(forged);
	return 0;
}
