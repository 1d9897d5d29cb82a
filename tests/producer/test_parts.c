/*
 * Tokenize parts used as they are: a job whose sources are the parts' Megatron pairs
 * (a glob over PREFIX_*-of-NNNNN.bin) delivers the very batches, document starts
 * included, of a job over the merged pair, for every step of an epoch on every rank.
 * The parts and the merge are made through the functions `shmfeed tokenize --shard` and
 * `--merge` call.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "producer/megatron_parts.h"
#include "producer/part_plan.h"
#include "producer/producer.h"
#include "tests/producer/harness.h"

#define N_PARTS 3

static void write_corpus(const char *path, uint32_t seed, uint32_t n_docs)
{
	static const char *const words[] = {"alpha", "beta", "gamma", "delta", "epsilon"};
	FILE *f = fopen(path, "w");
	uint64_t x = seed;

	H_CHECK(f != NULL, "%s", path);
	for (uint32_t d = 0; d < n_docs; d++) {
		uint32_t n;

		x = x * 6364136223846793005ull + 1442695040888963407ull;
		n = (uint32_t)(x >> 58);
		fprintf(f, "{\"text\": \"doc %u", d);
		for (uint32_t i = 0; i < n; i++)
			fprintf(f, " %s", words[(x >> (i % 48)) % 5]);
		fprintf(f, "\"}\n");
	}
	fclose(f);
}

static void make_part(const struct sf_config *cfg, const char *prefix, uint32_t part)
{
	struct sf_part_plan plan;
	struct sf_dataset *ds;
	struct sf_err e = {0};
	char name[4096];

	H_CHECK(sf__part_prefix(prefix, part, N_PARTS, name, sizeof(name)) == 0, "%s", prefix);
	H_CHECK(sf__part_plan_make(cfg, part, N_PARTS, &plan, &e) == 0, "%s", e.msg);
	H_CHECK(sf__dataset_open_part(cfg, &plan, &ds, &e) == 0, "%s", e.msg);
	H_CHECK(sf__dataset_write_megatron(ds, name, 1, NULL, NULL, &e) == 0, "%s", e.msg);
	H_CHECK(sf__part_manifest_write(name, &plan, ds, &e) == 0, "%s", e.msg);
	sf__dataset_close(ds);
	sf__part_plan_free(&plan);
}

/* Every payload of epoch 0 of the job over `path`, concatenated; *ret_len its bytes. */
static unsigned char *epoch_payloads(const char *path, size_t *ret_len,
				     struct sf_dataset_stats *ret_st)
{
	struct sf_config cfg;
	struct sf_dataset *ds;
	struct sf_builder *b;
	struct sf_err e = {0};
	unsigned char *all;
	uint64_t payload;

	h_config(&cfg, path, 4, 32, 2);
	cfg.doc_starts = 4;
	cfg.epochs = 1;
	H_CHECK(sf__dataset_open(&cfg, &ds, &e) == 0, "%s: %s", path, e.msg);
	H_CHECK(sf__builder_create(ds, &b, &e) == 0, "%s", e.msg);
	sf__dataset_stats(ds, ret_st);
	payload = sf__dataset_payload_bytes(ds);
	H_CHECK(ret_st->n_steps > 0 && ret_st->n_steps < 100000, "%llu steps",
		(unsigned long long)ret_st->n_steps);
	all = calloc(ret_st->n_steps * 2, payload);
	H_CHECK(all != NULL, "out of memory");
	for (uint64_t s = 0; s < ret_st->n_steps; s++)
		for (uint32_t r = 0; r < 2; r++) {
			uint32_t len;
			uint64_t first;

			H_CHECK(sf__builder_fill(b, r, s, all + (s * 2 + r) * payload, &len, &first,
						 &e) == 0,
				"%s", e.msg);
			H_CHECK(len == payload, "step %llu: %u bytes", (unsigned long long)s, len);
		}
	*ret_len = ret_st->n_steps * 2 * payload;
	sf__builder_free(b);
	sf__dataset_close(ds);
	return all;
}

int main(void)
{
	char *dir = h_tmpdir(), glob_text[1024], prefix[1024], merged[1024], parts_glob[4096];
	char *names[N_PARTS], name_buf[N_PARTS][4096];
	struct sf_dataset_stats st_parts, st_merged;
	struct sf_config cfg;
	struct sf_err e = {0};
	uint64_t docs, tokens;
	unsigned char *a, *b;
	size_t a_len, b_len;

	snprintf(glob_text, sizeof(glob_text), "%s/a.jsonl", dir);
	write_corpus(glob_text, 1, 3000);
	snprintf(glob_text, sizeof(glob_text), "%s/b.jsonl", dir);
	write_corpus(glob_text, 2, 700);
	snprintf(glob_text, sizeof(glob_text), "%s/*.jsonl", dir);
	snprintf(prefix, sizeof(prefix), "%s/part", dir);
	snprintf(merged, sizeof(merged), "%s/merged", dir);
	h_config(&cfg, glob_text, 4, 32, 2);
	cfg.encoding = "bytes";
	for (uint32_t i = 0; i < N_PARTS; i++) {
		make_part(&cfg, prefix, i);
		sf__part_prefix(prefix, i, N_PARTS, name_buf[i], sizeof(name_buf[i]));
		names[i] = name_buf[i];
	}
	H_CHECK(sf__parts_merge(names, N_PARTS, merged, &docs, &tokens, &e) == N_PARTS, "%s",
		e.msg);
	H_CHECK(docs == 3700, "%llu documents", (unsigned long long)docs);

	snprintf(parts_glob, sizeof(parts_glob), "%s_*-of-%05u.bin", prefix, N_PARTS);
	snprintf(merged + strlen(merged), sizeof(merged) - strlen(merged), ".bin");
	a = epoch_payloads(parts_glob, &a_len, &st_parts);
	b = epoch_payloads(merged, &b_len, &st_merged);
	H_CHECK(st_parts.n_tokens == tokens && st_merged.n_tokens == tokens, "%llu, %llu of %llu",
		(unsigned long long)st_parts.n_tokens, (unsigned long long)st_merged.n_tokens,
		(unsigned long long)tokens);
	H_CHECK(st_parts.n_docs == docs && st_merged.n_docs == docs, "documents differ");
	H_CHECK(a_len == b_len && !memcmp(a, b, a_len),
		"the parts' batches differ from the merge's");
	printf("parts as sources: %llu steps x 2 ranks identical to the merged pair\n",
	       (unsigned long long)st_parts.n_steps);
	free(a);
	free(b);
	h_rmtree(dir);
	free(dir);
	return 0;
}
