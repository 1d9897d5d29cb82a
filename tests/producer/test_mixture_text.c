/*
 * Mixtures with raw text sources through the whole pipeline (needs ../shared/data; exits
 * 77 without it). Three sources, r50k_base: "prose", tinyshakespeare's paragraphs (a .txt
 * with the separator "\n\n", 17 chunks); "multi", unicode_mix.txt (mixed scripts, emoji,
 * combining marks: several times the tokenizer's work per byte) as one document in each
 * of two files; "tokens", a nanoGPT file of 500 windows. Checks:
 *  - every row holds the tokens of the window the source's order says, against a
 *    reference made apart from the producers: tiktoken's own ids (tokref) for "multi",
 *    the tokenizer's ids of each paragraph for "prose", the file for "tokens"; the order
 *    (chunks permuted per epoch, a chunk's windows permuted and taken together) is
 *    computed here from its definition in docs/mixtures.md, and the row's source in
 *    the payload is sf__mix_locate()'s; each source goes through its own epochs;
 *  - the rows of a raw text source in a batch come from at most two chunks, and the
 *    producers tokenize about one token per token they deliver (no chunk per row);
 *  - 1, 2 and 4 producers and the direct build give the same batches, and so does a
 *    resume from every step; G = 8 as W=2 B=4 and W=4 B=2 gives the same global samples;
 *  - the same with document starts, with random offsets, and with a schedule whose
 *    phase boundary and ramp the resumes cross.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "common/arena.h"
#include "producer/dataset_impl.h"
#include "producer/mixture.h"
#include "producer/producer.h"
#include "producer/sampler.h"
#include "producer/text_index.h"
#include "producer/tokenizer/tokenizer.h"
#include "tests/producer/harness.h"

#define T     64u
#define STEPS 24
#define EOT   50256u

static char vocab_dir[4096];
static char *prose_path[1], *multi_paths[2], *tokens_path[1];
static struct sf_source_config srcs[3];
/* Each source's token stream as the reference makes it. */
static uint32_t *ref[3];
static size_t n_ref[3];

static void append(uint32_t s, const uint32_t *ids, size_t n)
{
	ref[s] = realloc(ref[s], (n_ref[s] + n) * sizeof(uint32_t));
	H_CHECK(ref[s], "out of memory");
	memcpy(ref[s] + n_ref[s], ids, n * sizeof(uint32_t));
	n_ref[s] += n;
}

/* The prose reference: each non-empty paragraph encoded alone, then <|endoftext|>. */
static void prose_reference(const char *text, size_t len)
{
	struct sf_tok *tok;
	struct sf_tok_encoder *enc;
	struct sf_err e = {0};
	char vocab[4200];
	const uint32_t eot = EOT;

	snprintf(vocab, sizeof(vocab), "%s/r50k_base.tiktoken", vocab_dir);
	H_CHECK(sf__tok_load("r50k_base", vocab, &tok, &e) == 0, "%s", e.msg);
	H_CHECK(sf__tok_encoder_create(tok, &enc, &e) == 0, "%s", e.msg);
	for (const char *p = text, *end = text + len; p < end;) {
		const char *q = memmem(p, (size_t)(end - p), "\n\n", 2);
		size_t n = q ? (size_t)(q - p) : (size_t)(end - p);

		if (n) {
			const uint32_t *ids;
			size_t n_ids;

			H_CHECK(sf__tok_encode(enc, p, n, SF_TOK_ALLOW_NONE, &ids, &n_ids, &e) == 0,
				"%s", e.msg);
			append(0, ids, n_ids);
			append(0, &eot, 1);
		}
		p = q ? q + 2 : end;
	}
	sf__tok_encoder_free(enc);
	sf__tok_free(tok);
}

/* Returns 0, or -1 when the shared data is not there. */
static int write_sources(const char *dir, const char *data)
{
	char path[4200];
	size_t prose_len, multi_len, tokref_len;
	char *prose, *multi, *tokref;
	const size_t n_tokens = 500 * T + 1;
	uint16_t *tokens = malloc(n_tokens * 2);
	const uint32_t eot = EOT;

	snprintf(path, sizeof(path), "%s/corpus/tinyshakespeare.txt", data);
	prose = h_read_file(path, &prose_len);
	snprintf(path, sizeof(path), "%s/tokref/unicode_mix.txt", data);
	multi = h_read_file(path, &multi_len);
	snprintf(path, sizeof(path), "%s/tokref/unicode_mix.r50k_base.u32", data);
	tokref = h_read_file(path, &tokref_len);
	if (!prose || !multi || !tokref) {
		free(prose);
		free(multi);
		free(tokref);
		free(tokens);
		return -1;
	}
	snprintf(vocab_dir, sizeof(vocab_dir), "%s/vocab", data);

	snprintf(path, sizeof(path), "%s/prose.txt", dir);
	h_write_file(path, prose, prose_len);
	prose_path[0] = strdup(path);
	prose_reference(prose, prose_len);
	for (int i = 0; i < 2; i++) {
		snprintf(path, sizeof(path), "%s/multi-%d.txt", dir, i);
		h_write_file(path, multi, multi_len);
		multi_paths[i] = strdup(path);
		append(1, (const uint32_t *)(const void *)tokref, tokref_len / 4);
		append(1, &eot, 1);
	}
	for (size_t i = 0; i < n_tokens; i++) {
		tokens[i] = (uint16_t)((i * 7919) % 50000);
		append(2, &(uint32_t){tokens[i]}, 1);
	}
	snprintf(path, sizeof(path), "%s/tokens.bin", dir);
	h_write_nanogpt(path, tokens, n_tokens);
	tokens_path[0] = strdup(path);
	free(tokens);
	free(prose);
	free(multi);
	free(tokref);

	memset(srcs, 0, sizeof(srcs));
	srcs[0] = (struct sf_source_config){.paths = prose_path,
					    .n_paths = 1,
					    .format = SF_FMT_TEXT,
					    .separator = "\n\n",
					    .name = "prose",
					    .weight = 400000000};
	srcs[1] = (struct sf_source_config){.paths = multi_paths,
					    .n_paths = 2,
					    .format = SF_FMT_TEXT,
					    .name = "multi",
					    .weight = 350000000};
	srcs[2] = (struct sf_source_config){.paths = tokens_path,
					    .n_paths = 1,
					    .format = SF_FMT_NANOGPT,
					    .name = "tokens",
					    .weight = 250000000};
	return 0;
}

static void mix_config(struct sf_config *cfg, uint32_t B, uint32_t W)
{
	h_config(cfg, prose_path[0], B, T, W);
	cfg->sources = srcs;
	cfg->n_sources = 3;
	cfg->mixture = 1;
	cfg->encoding = "r50k_base";
	cfg->vocab_dir = vocab_dir;
}

/*
 * The window (of the source's own stream) that sample j of source s is, from the
 * definition: pre-tokenized windows permuted per epoch; raw text chunks permuted per
 * epoch (tweak 1), and the windows whose first token lies in a chunk permuted among
 * themselves (tweak 2 + the chunk's index in the source) and taken together.
 */
static uint64_t spec_window(const struct sf_dataset *ds, uint32_t s, uint64_t j)
{
	const struct sf_mix_source *m = &ds->mix_sources[s];
	uint64_t epoch = j / m->n_windows, pos = j % m->n_windows;
	struct sf_perm order, inner;

	if (m->text_slot == UINT32_MAX) {
		sf__perm_init(&order, m->n_windows, m->seed, epoch, 1);
		return sf__perm_apply(&order, pos);
	}
	sf__perm_init(&order, m->n_chunks, m->seed, epoch, 1);
	for (uint64_t i = 0; i < m->n_chunks; i++) {
		uint64_t c = sf__perm_apply(&order, i);
		const struct sf_chunk *ch = &ds->chunks[m->first_chunk + c];
		uint64_t rel = ch->start - m->start, first = (rel + T - 1) / T;
		uint64_t end = (rel + ch->n_tokens + T - 1) / T, count;

		end = end < m->n_windows ? end : m->n_windows;
		count = end > first ? end - first : 0;
		if (pos < count) {
			sf__perm_init(&inner, count, m->seed, epoch, 2 + c);
			return first + sf__perm_apply(&inner, pos);
		}
		pos -= count;
	}
	H_CHECK(0, "source %u: sample %llu beyond its windows", s, (unsigned long long)j);
	return 0;
}

/*
 * A direct build of `steps` steps: every row checked against the reference (above), its
 * source against the mixture's, the chunks of each raw text source's rows in a batch
 * counted. Returns the hash of each global sample's row; *ret_epochs gets the epochs
 * each source reached.
 */
static uint64_t *check_rows(const struct sf_config *cfg, uint64_t steps, uint64_t *ret_epochs)
{
	const uint64_t B = cfg->batch_size, G = B * cfg->world_size;
	uint64_t *hash = malloc(steps * G * 8), out, encoded;
	struct sf_dataset *ds;
	struct sf_builder *b;
	struct sf_err e = {0};
	unsigned char *buf = h_builder(cfg, &ds, &b);

	H_CHECK(ds->token_bytes == 2, "token width %u", ds->token_bytes);
	for (uint32_t s = 0; s < 3; s++) {
		H_CHECK(ds->mix_sources[s].n_tokens == n_ref[s],
			"source %u holds %llu tokens, the reference %zu", s,
			(unsigned long long)ds->mix_sources[s].n_tokens, n_ref[s]);
		ret_epochs[s] = 0;
	}
	H_CHECK(ds->mix_sources[0].n_chunks > 10 && ds->mix_sources[1].n_chunks == 2,
		"chunks: prose %llu, multi %llu", (unsigned long long)ds->mix_sources[0].n_chunks,
		(unsigned long long)ds->mix_sources[1].n_chunks);
	for (uint64_t st = 0; st < steps; st++)
		for (uint32_t r = 0; r < cfg->world_size; r++) {
			uint32_t len;
			uint64_t first, chunks[2][4];
			uint32_t n_chunks[2] = {0, 0};
			const int32_t *sources;

			H_CHECK(sf__builder_fill(b, r, st, buf, &len, &first, &e) == 0, "%s",
				e.msg);
			sources = (const int32_t *)(buf + sf__sources_offset(B, T + 1, 2,
									     cfg->doc_starts));
			for (uint32_t i = 0; i < B; i++) {
				const uint16_t *row =
					(const uint16_t *)(buf + (size_t)i * (T + 1) * 2);
				uint64_t j, off;
				uint32_t s = sf__mix_locate(ds->mix, first + i, &j);
				const struct sf_mix_source *m = &ds->mix_sources[s];

				H_CHECK((uint32_t)sources[i] == s,
					"sample %llu: the batch says source %d, the mixture %u",
					(unsigned long long)(first + i), sources[i], s);
				off = cfg->mode == SF_SAMPLE_RANDOM
					      ? sf__random_below(m->seed, j, m->n_tokens - T)
					      : spec_window(ds, s, j) * T;
				for (uint32_t t = 0; t <= T; t++)
					H_CHECK(row[t] == ref[s][off + t],
						"sample %llu (source %u sample %llu, offset %llu) "
						"token %u: %u, the reference %u",
						(unsigned long long)(first + i), s,
						(unsigned long long)j, (unsigned long long)off, t,
						row[t], ref[s][off + t]);
				if (j / m->n_windows > ret_epochs[s])
					ret_epochs[s] = j / m->n_windows;
				if (s < 2) {
					uint64_t c = sf__text_find_chunk(ds, m->start + off);
					uint32_t k = 0;

					while (k < n_chunks[s] && chunks[s][k] != c)
						k++;
					if (k == n_chunks[s])
						chunks[s][n_chunks[s]++] = c;
				}
				hash[first + i] = XXH3_64bits(row, (T + 1) * 2);
			}
			H_CHECK(cfg->mode == SF_SAMPLE_RANDOM ||
					(n_chunks[0] <= 2 && n_chunks[1] <= 2),
				"step %llu rank %u: rows of a text source from %u and %u chunks",
				(unsigned long long)st, r, n_chunks[0], n_chunks[1]);
		}
	sf__builder_counters(b, &out, &encoded);
	/* Over many steps each chunk is tokenized about once per epoch (a few batches read
	 * part of a chunk they tokenized whole). */
	if (cfg->mode == SF_SAMPLE_WINDOWS && steps >= 1000)
		H_CHECK(encoded < 2 * out, "%llu tokens tokenized for %llu delivered",
			(unsigned long long)encoded, (unsigned long long)out);
	printf("ok: %llu samples (%s): every row is its source's reference window; %.3f tokens "
	       "tokenized per token delivered\n",
	       (unsigned long long)(steps * G),
	       cfg->mode == SF_SAMPLE_RANDOM ? "random" : "windows", (double)encoded / (double)out);
	free(buf);
	sf__builder_free(b);
	sf__dataset_close(ds);
	return hash;
}

/* A schedule: steps [0, 6) prose and tokens; [6, 12) a ramp to multi; then 2:1:1. */
static struct sf_weight_config w_pt[] = {{"prose", 1}, {"tokens", 1}}, w_m[] = {{"multi", 1}},
			       w_all[] = {{"prose", 2}, {"multi", 1}, {"tokens", 1}};
static struct sf_phase_config schedule[] = {
	{.until_step = 6, .weights = {w_pt, 2}},
	{.until_step = 12, .weights = {w_pt, 2}, .ramp_to = {w_m, 1}, .stages = 3},
	{.until_step = UINT64_MAX, .weights = {w_all, 3}},
};

int main(int argc, char **argv)
{
	char *dir;
	struct sf_config cfg;
	uint64_t epochs[3], *h24, *h42;

	setvbuf(stdout, NULL, _IOLBF, 0);
	if (argc < 2) {
		fprintf(stderr, "usage: %s SHARED_DATA_DIR\n", argv[0]);
		return 2;
	}
	dir = h_tmpdir();
	if (write_sources(dir, argv[1]) < 0) {
		printf("skip: %s not found\n", argv[1]);
		h_rmtree(dir);
		free(dir);
		return 77;
	}

	/* Every row, over more than an epoch of multi and several of tokens. */
	mix_config(&cfg, 4, 2);
	free(check_rows(&cfg, 1000, epochs));
	H_CHECK(epochs[1] >= 1 && epochs[2] >= 3 && epochs[0] == 0,
		"epochs reached: prose %llu, multi %llu, tokens %llu",
		(unsigned long long)epochs[0], (unsigned long long)epochs[1],
		(unsigned long long)epochs[2]);
	printf("ok: each source through its own epochs: multi reached epoch %llu, tokens %llu, "
	       "prose still in its first\n",
	       (unsigned long long)epochs[1], (unsigned long long)epochs[2]);

	/* G = 8 as W=2 B=4 and W=4 B=2. */
	h24 = check_rows(&cfg, 40, epochs);
	mix_config(&cfg, 2, 4);
	h42 = check_rows(&cfg, 40, epochs);
	H_CHECK(!memcmp(h24, h42, 40 * 8 * 8), "W=2 B=4 and W=4 B=2 differ");
	printf("ok: G=8 as W=2 B=4 and W=4 B=2: the same 320 global samples\n");
	free(h24);
	free(h42);

	mix_config(&cfg, 4, 2);
	cfg.doc_starts = 4;
	h_check_runs("prose/multi/tokens 0.4/0.35/0.25, windows, document starts", &cfg, STEPS);

	mix_config(&cfg, 4, 2);
	cfg.mode = SF_SAMPLE_RANDOM;
	free(check_rows(&cfg, 100, epochs));
	h_check_runs("prose/multi/tokens, random", &cfg, STEPS);

	mix_config(&cfg, 4, 2);
	for (int s = 0; s < 3; s++)
		srcs[s].weight = SF_WEIGHT_UNSET;
	cfg.schedule = schedule;
	cfg.n_phases = 3;
	{
		struct sf_dataset *ds;
		struct sf_builder *b;
		unsigned char *buf = h_builder(&cfg, &ds, &b);

		for (uint64_t k = 0; k < 6 * 8; k++) {
			uint64_t j;

			H_CHECK(sf__mix_locate(ds->mix, k, &j) != 1,
				"sample %llu is from multi before step 6", (unsigned long long)k);
		}
		free(buf);
		sf__builder_free(b);
		sf__dataset_close(ds);
	}
	free(check_rows(&cfg, STEPS, epochs));
	h_check_runs("schedule: phase, ramp to multi, phase", &cfg, STEPS);

	h_rmtree(dir);
	free(dir);
	for (int s = 0; s < 3; s++)
		free(ref[s]);
	free(prose_path[0]);
	free(multi_paths[0]);
	free(multi_paths[1]);
	free(tokens_path[0]);
	return 0;
}
