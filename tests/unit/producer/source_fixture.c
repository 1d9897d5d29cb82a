/* The fixture of the producer's source tests (source_fixture.h). */
#include <criterion/criterion.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/unit/producer/source_fixture.h"

char dir[64];
char path[4096];
struct sf_config cfg;
struct sf_source_config src;
static char *paths[2];

static int rm_one(const char *p, const struct stat *sb, int flag, struct FTW *ftw)
{
	(void)sb;
	(void)flag;
	(void)ftw;
	return remove(p);
}

void source_fixture_setup(const char *tag, uint32_t batch, uint32_t seq_len)
{
	snprintf(dir, sizeof(dir), "/tmp/sf-%s-XXXXXX", tag);
	cr_assert(mkdtemp(dir));
	cr_assert_eq(setenv("SHMFEED_CACHE_DIR", dir, 1), 0); /* index caches go with dir */
	sf__config_defaults(&cfg);
	memset(&src, 0, sizeof(src));
	paths[0] = path;
	src.paths = paths;
	src.n_paths = 1;
	cfg.sources = &src;
	cfg.n_sources = 1;
	cfg.batch_size = batch;
	cfg.seq_len = seq_len;
	cfg.world_size = 1;
	cfg.local_ranks = 1;
	cfg.producers = 1;
}

void write_llmc_datafile(const char *file_path, const uint32_t *tokens, size_t n,
			 const char *model_desc)
{
	int llama = !strcmp(model_desc, "llama-3");
	int32_t header[256] = {llama ? 20240801 : 20240520, llama ? 7 : 1, (int32_t)n};
	FILE *f = fopen(file_path, "wb");

	cr_assert(!strcmp(model_desc, "gpt-2") || llama, "unknown model descriptor %s", model_desc);
	cr_assert(f && fwrite(header, sizeof(header), 1, f) == 1);
	for (size_t i = 0; i < n; i++) {
		uint16_t narrow = (uint16_t)tokens[i];

		cr_assert(llama ? fwrite(&tokens[i], 4, 1, f) == 1 : fwrite(&narrow, 2, 1, f) == 1);
	}
	cr_assert_eq(fclose(f), 0);
}

void source_fixture_teardown(void)
{
	nftw(dir, rm_one, 8, FTW_DEPTH | FTW_PHYS);
}
